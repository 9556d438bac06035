//! Rate control (docs/algorithms/proteus.md §2.3–§2.6): STARTING, PROBING with paired MIs, and
//! MOVING with the confidence amplifier and the dynamic change boundary. Rates in bit/s
//! (the unit of docs/algorithms/proteus.md §2 and §5.4), utilities dimensionless.
//!
//! The controller is generic over what an MI carries (`T`) and scores MIs through a
//! [`Scorer`] at decision time. The flow passes the MI's effective utility inputs and the
//! active utility function, so a reference MI is always re-scored under the function in
//! force (§4: never compare utilities computed under different functions); the vectors of
//! docs/algorithms/proteus.md §5 pass utilities directly, through a closure.

use crate::params::{
    AMPLIFIER_EXPONENT, GRADIENT_TO_RATE_FACTOR, INCREMENTAL_STEP, INITIAL_MAX_STEP,
    LOSS_COEFFICIENT, MAX_RATE_BPS, MIN_RATE_BPS, MIN_RATE_CHANGE_BPS, PROBING_STEP, RATE_EXPONENT,
    UDT_MEGABIT,
};
use crate::utility::{ProbingRule, UtilityFn};
use algs_core::units::BITS_PER_SEC_PER_MBPS;

/// How the rate controller scores MIs: one at a time, and two that it compares with each
/// other (a probe pair, or a move's MI and its reference).
pub trait Scorer<T> {
    fn score(&self, mi: &T) -> f64;
    /// The utilities of `a` and `b` for comparing them; by default each scored alone.
    fn compare(&self, a: &T, b: &T) -> (f64, f64) {
        (self.score(a), self.score(b))
    }
}

impl<T, F: Fn(&T) -> f64> Scorer<T> for F {
    fn score(&self, mi: &T) -> f64 {
        self(mi)
    }
}

/// Direction of a rate decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Up,
    Down,
}

impl Direction {
    fn sign(self) -> f64 {
        match self {
            Direction::Up => 1.0,
            Direction::Down => -1.0,
        }
    }
}

/// An evaluated MI: the rate it was scheduled at (bit/s) and what scores it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored<T> {
    pub rate_bps: f64,
    pub mi: T,
}

/// The rate controller's state (§2.1).
#[derive(Debug, Clone, PartialEq)]
pub enum Mode<T> {
    /// Doubling while the utility grows; `reference` is the last MI that improved it.
    Starting { reference: Option<Scored<T>> },
    /// Paired probes around the current rate, sized and decided by `rule`.
    Probing { rule: ProbingRule },
    /// Moving in `dir` while the utility follows; compared against `reference`.
    Moving {
        dir: Direction,
        reference: Scored<T>,
    },
}

/// What a batch did to the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A new batch must be scheduled.
    Reschedule,
    /// The batch did not fit the mode (wrong size after a switch); it was dropped and a
    /// new batch must be scheduled.
    Dropped,
}

/// Per-flow rate-control state.
#[derive(Debug, Clone, PartialEq)]
pub struct RateControl<T> {
    mode: Mode<T>,
    /// Current rate (the central rate while probing), bit/s.
    rate_bps: f64,
    /// Consecutive decisions in one direction (MOVING) or probing rounds (PROBING).
    rounds: u32,
    /// Consecutive capped steps: the boundary is rate·(0.05 + 0.05·k).
    k: u32,
    /// The caller's verdict that a scavenger stands over a primary's queue
    /// ([`RateControl::set_over_primary_queue`]).
    over_primary_queue: bool,
}

/// m = ⌊(rounds + 1)/2⌋^1.2, UDT's integer form (§2.6; [CCP-PCC] uses the real-valued
/// (τ+1)/2; we keep UDT's because it is what the paper evaluated).
pub fn confidence_amplifier(rounds: u32) -> f64 {
    f64::from(rounds.saturating_add(1) / 2).powf(AMPLIFIER_EXPONENT)
}

/// The raw rate change Δ = θ0·2^40·ΔU/Δr bit/s (§2.6: γ = M·ΔU/Δr, Δ = γ·M·θ0).
/// A zero Δr (no rate difference) gives an unbounded step, which the boundary caps.
pub fn gradient_step_bps(delta_u: f64, delta_r_bps: f64) -> f64 {
    let gamma = UDT_MEGABIT * delta_u.abs() / delta_r_bps.abs();
    let step = gamma * UDT_MEGABIT * GRADIENT_TO_RATE_FACTOR;
    if step.is_nan() { 0.0 } else { step }
}

/// Not in UDT, for scavengers: whether every one of `mis` lost more to its penalties than
/// twice what its rate earns (u < −x^t), and if so by how much the penalties outweigh the
/// marginal reward t·x^(t−1), in utility per Mbit/s (the least over the MIs).
///
/// With an MI's penalties written per Mbit/s, u = x^t − x·P, so
/// du/dx = t·x^(t−1) − P − x·dP/dx. Beside a primary that keeps the queue moving (BBR's
/// gain cycle), P is large but set by the primary, not by a scavenger's small rate, and
/// it varies from MI to MI by far more than the ±5 % probes change x·P: the pair votes
/// then follow the noise, and on the eBPF datapath Proteus-S random-walked at 2–6 Mbit/s
/// beside BBR (0.88–0.94 of BBR's throughput alone). When P is that large in every MI,
/// du/dx < 0 for any dP/dx ≥ 0 (a flow's own rate never shrinks the queue). Every MI and
/// twice the reward, because on a clean path the noise-tolerance rules still penalise a
/// jittery or draining MI now and then (P of about the reward).
fn overload_excess<'a, T: 'a>(
    mis: impl IntoIterator<Item = &'a Scored<T>>,
    scorer: &impl Scorer<T>,
) -> Option<f64> {
    let mut excess = f64::INFINITY;
    for mi in mis {
        let x = mi.rate_bps / BITS_PER_SEC_PER_MBPS;
        let reward = x.powf(RATE_EXPONENT);
        let u = scorer.score(&mi.mi);
        if u.is_nan() || u >= -reward {
            return None;
        }
        let penalty = (reward - u) / x;
        excess = excess.min(penalty - RATE_EXPONENT * reward / x);
    }
    excess.is_finite().then_some(excess)
}

impl<T: Clone> RateControl<T> {
    /// A flow in STARTING at `rate_bps`.
    pub fn new(rate_bps: f64) -> Self {
        RateControl {
            mode: Mode::Starting { reference: None },
            rate_bps: rate_bps.max(MIN_RATE_BPS),
            rounds: 1,
            k: 0,
            over_primary_queue: false,
        }
    }

    /// A flow that starts probing at `rate_bps` (a flow handed over with a known rate).
    pub fn probing(rate_bps: f64, f: &UtilityFn) -> Self {
        let rate_bps = rate_bps.clamp(MIN_RATE_BPS, MAX_RATE_BPS);
        RateControl {
            mode: Mode::Probing {
                rule: f.probing_rule(rate_bps),
            },
            rate_bps,
            rounds: 1,
            k: 0,
            over_primary_queue: false,
        }
    }

    pub fn mode(&self) -> &Mode<T> {
        &self.mode
    }

    pub fn rate_bps(&self) -> f64 {
        self.rate_bps
    }

    pub fn rounds(&self) -> u32 {
        self.rounds
    }

    pub fn k(&self) -> u32 {
        self.k
    }

    /// Scales the rate (STARTING only: the first RTT sample scales the initial rate, §2.3).
    pub fn scale_starting_rate(&mut self, factor: f64) {
        if matches!(self.mode, Mode::Starting { .. }) && factor.is_finite() && factor > 1.0 {
            self.rate_bps = (self.rate_bps * factor).min(MAX_RATE_BPS);
        }
    }

    /// Not in UDT, for scavengers: the queue the flow stands over has lasted, so it is a
    /// primary's (the caller's test), and the utility surely falls with the rate whatever
    /// the votes say: probing decides down and a move down goes on. Beside CUBIC at 0.4 BDP
    /// the votes follow MI noise seven times the primary's trend, and Proteus-S
    /// random-walked at 2–4 Mbit/s where it should sit at its minimum.
    pub fn set_over_primary_queue(&mut self, over: bool) {
        self.over_primary_queue = over;
    }

    /// Number of MIs the next batch has.
    pub fn batch_len(&self) -> usize {
        match self.mode {
            Mode::Probing { rule } => 2 * rule.pairs(),
            _ => 1,
        }
    }

    /// The rates of the next batch, and the rate between batches. `coin` picks each pair's
    /// order (§2.4: random direction for the first MI of a pair, the opposite for the
    /// second; [CCP-PCC] uses a fixed lower/higher order, which lets a rising queue bias
    /// every pair the same way). ε stays 5 % in every round (UDT; Allegro grows it).
    pub fn plan(&self, mut coin: impl FnMut() -> bool) -> (Vec<f64>, f64) {
        match self.mode {
            Mode::Probing { rule } => {
                let up = self.rate_bps * (1.0 + PROBING_STEP);
                let down = self.rate_bps * (1.0 - PROBING_STEP);
                let rates = (0..rule.pairs())
                    .flat_map(|_| if coin() { [up, down] } else { [down, up] })
                    .collect();
                (rates, self.rate_bps)
            }
            _ => (vec![self.rate_bps], self.rate_bps),
        }
    }

    /// Feeds one completed batch, in time order. `scorer` gives MIs' utilities under the
    /// active function `f`.
    pub fn on_batch(
        &mut self,
        batch: &[Scored<T>],
        f: &UtilityFn,
        scorer: impl Scorer<T>,
    ) -> Outcome {
        if batch.len() != self.batch_len() {
            return Outcome::Dropped;
        }
        match &self.mode {
            Mode::Starting { reference } => {
                let mi = &batch[0];
                let u_ref = reference.as_ref().map_or(0.0, |r| scorer.score(&r.mi));
                if scorer.score(&mi.mi) > u_ref {
                    self.rate_bps = 2.0 * mi.rate_bps;
                    self.mode = Mode::Starting {
                        reference: Some(mi.clone()),
                    };
                } else {
                    // Back to the last good rate: the failed MI ran at twice it.
                    self.rate_bps = (mi.rate_bps / 2.0).max(MIN_RATE_BPS);
                    self.enter_probing(f);
                }
            }
            Mode::Probing { rule } => {
                let rule = *rule;
                self.check_probing(batch, rule, &scorer);
            }
            Mode::Moving { dir, reference } => {
                let (dir, reference) = (*dir, reference.clone());
                self.update_moving(&batch[0], dir, &reference, f, &scorer);
            }
        }
        // The datapath's Rate register cannot go higher.
        self.rate_bps = self.rate_bps.min(MAX_RATE_BPS);
        Outcome::Reschedule
    }

    /// §2.4/§2.5: votes, decision, and the first move.
    fn check_probing(&mut self, batch: &[Scored<T>], rule: ProbingRule, scorer: &impl Scorer<T>) {
        let n = rule.pairs();
        let pairs: Vec<_> = batch
            .chunks_exact(2)
            .map(|p| {
                let (ua, ub) = scorer.compare(&p[0].mi, &p[1].mi);
                let first_higher = p[0].rate_bps > p[1].rate_bps;
                let (u_hi, u_lo) = if first_higher { (ua, ub) } else { (ub, ua) };
                // A tie counts as "decrease" when the first MI has the higher rate (§2.5).
                let vote = if u_hi > u_lo {
                    Direction::Up
                } else if u_hi < u_lo || first_higher {
                    Direction::Down
                } else {
                    Direction::Up
                };
                (vote, ua, ub)
            })
            .collect();
        let inc = pairs.iter().filter(|p| p.0 == Direction::Up).count();
        let dec = n - inc;
        let decided = match rule {
            // 2-of-3 increases, decreasing needs all three.
            ProbingRule::Primary => inc > n / 2 || dec == n,
            // Both pairs agree, either way.
            ProbingRule::Scavenger => dec > n / 2 || inc == n,
        };
        let excess = match rule {
            ProbingRule::Primary => None,
            ProbingRule::Scavenger => overload_excess(batch, scorer),
        };
        let delta_r = (batch[0].rate_bps - batch[1].rate_bps).abs();
        let (dir, level_delta_u) = if let Some(excess) = excess {
            // A scavenger whose utility surely falls with the rate goes down, whatever
            // the noisy votes say; the level gives the utility lost across a probe pair.
            (Direction::Down, excess * delta_r / BITS_PER_SEC_PER_MBPS)
        } else if rule == ProbingRule::Scavenger && self.over_primary_queue {
            (Direction::Down, 0.0)
        } else if !decided {
            self.rounds += 1;
            self.check_min_rate_restart();
            return;
        } else if inc > dec {
            if self.rate_bps <= MIN_RATE_BPS {
                // Not in UDT: from the minimum MOVING climbs about 0.5 Mbit/s an MI until one
                // noisy MI reverses it, so an idle link took 10 s or more to fill. An
                // undecided round here already starts over, and room is better evidence.
                self.start_over();
                return;
            }
            (Direction::Up, 0.0)
        } else {
            (Direction::Down, 0.0)
        };
        // Reference: the better MI of the last pair that agrees with the decision (without
        // one, the lower probe of the last pair: where the decision points).
        let reference = batch
            .chunks_exact(2)
            .zip(&pairs)
            .rev()
            .find(|(_, p)| p.0 == dir)
            .map(|(mis, p)| if p.1 >= p.2 { &mis[0] } else { &mis[1] })
            .or_else(|| {
                let last = &batch[batch.len() - 2..];
                last.iter().min_by(|a, b| a.rate_bps.total_cmp(&b.rate_bps))
            })
            .cloned();
        let Some(reference) = reference else {
            return;
        };
        // ΔU sums the agreeing pairs but divides by all n (§2.6).
        let delta_u = pairs
            .iter()
            .filter(|p| p.0 == dir)
            .map(|p| (p.1 - p.2).abs())
            .sum::<f64>()
            / n as f64;
        let delta_u = delta_u.max(level_delta_u);
        self.rate_bps *= 1.0 + dir.sign() * PROBING_STEP;
        self.rounds = 1;
        self.k = 0;
        let step = self.bounded_step(gradient_step_bps(delta_u, delta_r));
        self.rate_bps += dir.sign() * step;
        if self.rate_bps < MIN_RATE_BPS {
            self.rate_bps = MIN_RATE_BPS;
            self.rounds = 1;
            self.k = 0;
            self.mode = Mode::Probing { rule };
        } else {
            self.mode = Mode::Moving { dir, reference };
        }
        self.check_min_rate_restart();
    }

    /// §2.6, DECISION_MADE: continue while the utility follows the direction, else step
    /// back and probe again.
    fn update_moving(
        &mut self,
        mi: &Scored<T>,
        dir: Direction,
        reference: &Scored<T>,
        f: &UtilityFn,
        scorer: &impl Scorer<T>,
    ) {
        let (u, u_ref) = scorer.compare(&mi.mi, &reference.mi);
        let (r, r_ref) = (mi.rate_bps, reference.rate_bps);
        let scavenger = f.probing_rule(r) == ProbingRule::Scavenger;
        let excess = scavenger
            .then(|| overload_excess([mi, reference], scorer))
            .flatten();
        let (follows, delta_u) = match excess {
            // Both MIs swamped: the utility surely falls with the rate.
            Some(excess) => (
                dir == Direction::Down,
                (u - u_ref)
                    .abs()
                    .max(excess * (r - r_ref).abs() / BITS_PER_SEC_PER_MBPS),
            ),
            None if scavenger && self.over_primary_queue && dir == Direction::Down => {
                (true, (u - u_ref).abs())
            }
            None => (
                match dir {
                    Direction::Up => (u > u_ref && r > r_ref) || (u < u_ref && r < r_ref),
                    Direction::Down => (u > u_ref && r < r_ref) || (u < u_ref && r > r_ref),
                },
                u - u_ref,
            ),
        };
        let raw = gradient_step_bps(delta_u, r - r_ref);
        if follows {
            self.rounds += 1;
            let step = self.bounded_step(raw * confidence_amplifier(self.rounds));
            self.rate_bps += dir.sign() * step;
            self.mode = Mode::Moving {
                dir,
                reference: mi.clone(),
            };
            if self.rate_bps < MIN_RATE_BPS {
                self.rate_bps = MIN_RATE_BPS;
                self.enter_probing(f);
                self.k = 0;
            }
        } else {
            // Reversal: a step back sized by the measured gradient (m = 1, k kept).
            self.rounds = 1;
            let step = self.bounded_step(raw);
            self.rate_bps -= dir.sign() * step;
            if self.rate_bps < MIN_RATE_BPS {
                self.rate_bps = MIN_RATE_BPS;
                self.k = 0;
            }
            self.enter_probing(f);
        }
    }

    /// The dynamic change boundary, then the minimum change (§2.6; the floor comes after
    /// the boundary, so at low rates a step exceeds it, as in UDT). The boundary grows
    /// without limit as in UDT ([CCP-PCC] caps it at 25 %, [NSDI18] grows by 6 %; §2.8):
    /// the amplifier only reaches it after several capped steps in a row.
    fn bounded_step(&mut self, step: f64) -> f64 {
        let max_step = self.rate_bps * (INITIAL_MAX_STEP + INCREMENTAL_STEP * f64::from(self.k));
        let step = if step > max_step {
            self.k += 1;
            max_step
        } else {
            self.k = self.k.saturating_sub(1);
            step
        };
        step.max(MIN_RATE_CHANGE_BPS)
    }

    fn enter_probing(&mut self, f: &UtilityFn) {
        self.rounds = 1;
        self.mode = Mode::Probing {
            rule: f.probing_rule(self.rate_bps),
        };
    }

    /// §2.4/§2.6: a flow stuck at the minimum rate starts over.
    fn check_min_rate_restart(&mut self) {
        let moving = matches!(self.mode, Mode::Moving { .. });
        if (self.rounds > 1 || moving) && self.rate_bps <= MIN_RATE_BPS {
            self.start_over();
        }
    }

    /// STARTING again from the minimum rate. UDT keeps the old STARTING reference here; its
    /// utility was measured at a higher rate, so the first MI would fail at once and halve
    /// below the minimum. We start STARTING afresh.
    fn start_over(&mut self) {
        self.rate_bps = MIN_RATE_BPS;
        self.k = 0;
        self.rounds = 1;
        self.mode = Mode::Starting { reference: None };
    }

    /// The flow's utility function changed (§4). Returns true if the batch in progress
    /// must be aborted and a new one scheduled.
    pub fn on_utility_change(&mut self, f: &UtilityFn) -> bool {
        match self.mode {
            // The reference is re-scored under the new function at the next comparison.
            Mode::Starting { .. } => false,
            Mode::Probing { rule } => {
                let new_rule = f.probing_rule(self.rate_bps);
                if new_rule == rule {
                    return false;
                }
                // Abort the round, keep the central rate and k, start over with the new
                // number of pairs and decision rule.
                self.rounds = 1;
                self.mode = Mode::Probing { rule: new_rule };
                true
            }
            Mode::Moving { .. } => {
                // The gradient's scale changes with the function: no amplification or
                // widened boundary carried over.
                self.rounds = 1;
                self.k = 0;
                false
            }
        }
    }

    /// Not in UDT, for scavengers: one MI at `rate_bps`, sent over a standing queue (the
    /// caller's test), lost a fraction `loss` of its packets, so many that its loss penalty
    /// alone outweighs what its rate earns (c·x·L > x^t, about 6 % at 50 Mbit/s). Outside
    /// STARTING, the batch in progress ends and the flow probes again from what the path
    /// delivered, x·(1 − L), if that is lower. Returns true if the batch must be aborted.
    ///
    /// Beside a primary's start-up on a long path, a probing round otherwise holds its
    /// rate through four such MIs and then moves down 5–10 % per MI; BBR took that steady
    /// loss for a policer and held a fifth of the link for 14 s. Only over a queue: random
    /// loss on an empty path comes one packet at a time, and one lost packet of the 12 in
    /// a 30 ms MI at 5 Mbit/s is already over the line.
    pub fn on_swamped_mi(&mut self, rate_bps: f64, loss: f64, f: &UtilityFn) -> bool {
        let x = rate_bps / BITS_PER_SEC_PER_MBPS;
        let swamped = LOSS_COEFFICIENT * x * loss > x.powf(RATE_EXPONENT);
        if !swamped
            || matches!(self.mode, Mode::Starting { .. })
            || f.probing_rule(self.rate_bps) != ProbingRule::Scavenger
        {
            return false;
        }
        self.rate_bps = self.rate_bps.min(rate_bps * (1.0 - loss)).max(MIN_RATE_BPS);
        self.k = 0;
        self.enter_probing(f);
        true
    }

    /// The datapath saw a timeout: drop what was pending, halve the rate and probe
    /// (§2.2 REC; UDT has no timeout handling).
    pub fn on_timeout(&mut self, f: &UtilityFn) {
        self.rate_bps = (self.rate_bps / 2.0).max(MIN_RATE_BPS);
        self.k = 0;
        self.enter_probing(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::utility::UtilityInputs;

    const P: UtilityFn = UtilityFn::Primary;
    const S: UtilityFn = UtilityFn::Scavenger;

    fn mi(rate_bps: f64, u: f64) -> Scored<f64> {
        Scored { rate_bps, mi: u }
    }

    fn id(u: &f64) -> f64 {
        *u
    }

    /// ±2 bit/s: UDT rounds rates to whole bit/s through float32 factors (§5).
    fn rate_eq(got: f64, want: f64) {
        assert!((got - want).abs() <= 2.0, "rate {got}, want {want}");
    }

    fn probing_at<T>(central: f64, rule: ProbingRule) -> RateControl<T> {
        RateControl {
            mode: Mode::Probing { rule },
            rate_bps: central,
            rounds: 1,
            k: 0,
            over_primary_queue: false,
        }
    }

    #[test]
    fn r1_starting_doubles_until_utility_drops() {
        let mut rc: RateControl<UtilityInputs> = RateControl::new(1.12e6);
        rc.scale_starting_rate(100.0 / 30.0);
        rate_eq(rc.rate_bps(), 3_733_333.33);
        let at = |rate_bps: f64, g: f64| Scored {
            rate_bps,
            mi: UtilityInputs {
                x_mbps: rate_bps / 1e6,
                gradient: g,
                ..UtilityInputs::default()
            },
        };
        let score = |i: &UtilityInputs| P.utility(i);
        let mut utilities = Vec::new();
        for _ in 0..4 {
            let m = at(rc.rate_bps(), 0.0);
            utilities.push(score(&m.mi));
            rc.on_batch(&[m], &P, score);
            assert!(matches!(rc.mode(), Mode::Starting { .. }));
        }
        for (got, want) in utilities.iter().zip([3.2726, 6.1068, 11.3957, 21.2651]) {
            assert!((got - want).abs() < 1e-3, "u {got} want {want}");
        }
        rate_eq(rc.rate_bps(), 59_733_333.33);
        // 59.733 Mbit/s over a 50 Mbit/s link queues: g = 59.733/50 − 1.
        let over = at(rc.rate_bps(), 59.733_333 / 50.0 - 1.0);
        assert!((score(&over.mi) + 10425.6).abs() < 0.5);
        rc.on_batch(&[over], &P, score);
        rate_eq(rc.rate_bps(), 29_866_666.67);
        assert_eq!(
            rc.mode(),
            &Mode::Probing {
                rule: ProbingRule::Primary
            }
        );
        assert_eq!(rc.rounds(), 1);
        assert_eq!(rc.batch_len(), 6);
    }

    fn r2_batch() -> [Scored<f64>; 6] {
        [
            mi(21e6, 15.46),
            mi(19e6, 14.16),
            mi(19e6, 14.20),
            mi(21e6, 15.40),
            mi(21e6, 14.00),
            mi(19e6, 14.30),
        ]
    }

    #[test]
    fn r2_primary_majority_increase() {
        let mut rc = probing_at(20e6, ProbingRule::Primary);
        assert_eq!(rc.on_batch(&r2_batch(), &P, id), Outcome::Reschedule);
        rate_eq(rc.rate_bps(), 21_500_000.0);
        assert_eq!(
            rc.mode(),
            &Mode::Moving {
                dir: Direction::Up,
                reference: mi(21e6, 15.40)
            }
        );
        assert_eq!((rc.rounds(), rc.k()), (1, 0));
        // The unfloored step of R2.
        let raw = gradient_step_bps(2.5 / 3.0, 2e6);
        assert!((raw - 458_129.8).abs() < 0.1);
    }

    /// The direction a primary's probing round at 50 Mbit/s decides on `batch`, if any.
    fn primary_round(
        batch: &[Scored<UtilityInputs>],
        scorer: impl Scorer<UtilityInputs>,
    ) -> Option<Direction> {
        let mut rc = probing_at(50e6, ProbingRule::Primary);
        rc.on_batch(batch, &P, scorer);
        match rc.mode() {
            Mode::Moving { dir, .. } => Some(*dir),
            _ => None,
        }
    }

    #[test]
    fn a_primary_round_is_not_decided_by_which_probe_drew_a_loss() {
        // Three pairs whose higher probe lost one packet of 130.
        let probe = |rate_bps: f64, lost: u32| Scored {
            rate_bps,
            mi: UtilityInputs {
                x_mbps: rate_bps / 1e6,
                loss: f64::from(lost) / 130.0,
                resolved: 130,
                ..UtilityInputs::default()
            },
        };
        let batch: Vec<_> = (0..3)
            .flat_map(|_| [probe(52.5e6, 1), probe(47.5e6, 0)])
            .collect();
        // Each MI scored alone (UDT): every pair votes down, unanimously.
        let alone = |i: &UtilityInputs| P.utility(i);
        assert_eq!(primary_round(&batch, alone), Some(Direction::Down));
        // Compared with their pooled loss rate: the rate difference decides.
        assert_eq!(primary_round(&batch, P), Some(Direction::Up));
    }

    #[test]
    fn r3_primary_needs_unanimity_to_decrease() {
        let mut rc = probing_at(20e6, ProbingRule::Primary);
        let mut b = r2_batch();
        b[2].mi = 15.40;
        b[3].mi = 14.20;
        rc.on_batch(&b, &P, id);
        assert_eq!(rc.rate_bps(), 20e6);
        assert_eq!(rc.rounds(), 2);
        assert!(matches!(rc.mode(), Mode::Probing { .. }));
    }

    #[test]
    fn r4_scavenger_needs_both_pairs() {
        let mut rc = probing_at(20e6, ProbingRule::Scavenger);
        // Increase + decrease: no decision.
        let split = [
            mi(21e6, 15.0),
            mi(19e6, 14.0),
            mi(19e6, 15.0),
            mi(21e6, 14.0),
        ];
        rc.on_batch(&split, &S, id);
        assert_eq!((rc.rate_bps(), rc.rounds()), (20e6, 2));
        // Decrease + decrease: ΔU = (0.9 + 0.7)/2, Δ = 439,805 → floor 500,000.
        let down = [
            mi(21e6, 14.0),
            mi(19e6, 14.9),
            mi(19e6, 15.0),
            mi(21e6, 14.3),
        ];
        rc.on_batch(&down, &S, id);
        rate_eq(rc.rate_bps(), 18_500_000.0);
        assert!(matches!(
            rc.mode(),
            Mode::Moving {
                dir: Direction::Down,
                ..
            }
        ));
        // §5.4 rounds it to 439,805.
        assert!((gradient_step_bps(0.8, 2e6) - 439_805.0).abs() < 1.0);
    }

    #[test]
    fn r5_r6_r7_moving_amplifies_caps_and_reverses() {
        let mut rc = probing_at(20e6, ProbingRule::Primary);
        rc.on_batch(&r2_batch(), &P, id);
        // R5: continue, m = 1, Δ = 879,609.30.
        rc.on_batch(&[mi(21.5e6, 15.80)], &P, id);
        rate_eq(rc.rate_bps(), 22_379_609.3);
        assert_eq!((rc.rounds(), rc.k()), (2, 0));
        // R6: rounds 3, m = 2^1.2, Δ = 2,297,397 capped at 5 % → k = 1.
        rc.on_batch(&[mi(22_379_609.3, 16.60)], &P, id);
        rate_eq(rc.rate_bps(), 23_498_589.77);
        assert_eq!((rc.rounds(), rc.k()), (3, 1));
        // R7: utility falls at a higher rate → step back 500,000, k 1 → 0, PROBING.
        rc.on_batch(&[mi(23_498_589.77, 16.20)], &P, id);
        rate_eq(rc.rate_bps(), 22_998_589.77);
        assert_eq!((rc.rounds(), rc.k()), (1, 0));
        assert!(matches!(rc.mode(), Mode::Probing { .. }));
    }

    /// u = x^0.9 − x·P at `rate_bps`, with the penalty P per Mbit/s.
    fn penalised(rate_bps: f64, p: f64) -> Scored<f64> {
        let x = rate_bps / 1e6;
        mi(rate_bps, x.powf(0.9) - x * p)
    }

    /// Both pairs vote up (the higher probe drew the smaller penalty), but every MI's
    /// penalty is far above the marginal reward t·x^(t−1) ≈ 0.77 at 5 Mbit/s.
    fn noisy_overload_batch() -> [Scored<f64>; 4] {
        [
            penalised(5.25e6, 20.0),
            penalised(4.75e6, 40.0),
            penalised(4.75e6, 35.0),
            penalised(5.25e6, 25.0),
        ]
    }

    #[test]
    fn a_scavenger_goes_down_when_penalties_outweigh_the_rate_whatever_the_votes() {
        let mut rc = probing_at(5e6, ProbingRule::Scavenger);
        rc.on_batch(&noisy_overload_batch(), &S, id);
        assert!(rc.rate_bps() < 4.75e6, "rate {}", rc.rate_bps());
        assert!(matches!(
            rc.mode(),
            Mode::Moving {
                dir: Direction::Down,
                ..
            }
        ));
    }

    #[test]
    fn a_swamped_scavenger_keeps_moving_down() {
        let mut rc = probing_at(5e6, ProbingRule::Scavenger);
        rc.on_batch(&noisy_overload_batch(), &S, id);
        // This MI scores below the reference (the lower probe of the last pair), which
        // would reverse the move; both are swamped, so the move goes on.
        let before = rc.rate_bps();
        rc.on_batch(&[penalised(before, 60.0)], &S, id);
        assert!(rc.rate_bps() < before, "rate {}", rc.rate_bps());
        assert_eq!(rc.rounds(), 2);
    }

    #[test]
    fn over_primary_queue_a_scavenger_goes_down_and_keeps_going() {
        // Both pairs vote up on a clean batch; over a primary's queue the flow goes down.
        let clean = [
            mi(5.25e6, 4.5),
            mi(4.75e6, 4.0),
            mi(4.75e6, 4.0),
            mi(5.25e6, 4.5),
        ];
        let mut rc = probing_at(5e6, ProbingRule::Scavenger);
        rc.set_over_primary_queue(true);
        rc.on_batch(&clean, &S, id);
        let after_decision = rc.rate_bps();
        assert!(after_decision < 4.75e6, "rate {after_decision}");
        // The step scores below its reference at a lower rate, which reverses a move down
        // under UDT's rule; over a primary's queue the move goes on.
        rc.on_batch(&[mi(after_decision, 1.0)], &S, id);
        assert!(rc.rate_bps() < after_decision, "rate {}", rc.rate_bps());
        assert_eq!(rc.rounds(), 2);
        // Primaries, and scavengers where no queue lasts, keep the votes.
        for (rule, over) in [
            (ProbingRule::Primary, true),
            (ProbingRule::Scavenger, false),
        ] {
            let mut rc = probing_at(5e6, rule);
            rc.set_over_primary_queue(over);
            let batch: Vec<_> = clean.iter().chain(&clean[..2]).cloned().collect();
            rc.on_batch(&batch[..rc.batch_len()], if over { &P } else { &S }, id);
            assert!(rc.rate_bps() > 5.25e6, "{rule:?}: rate {}", rc.rate_bps());
        }
    }

    #[test]
    fn one_mi_without_a_heavy_penalty_leaves_the_decision_to_the_votes() {
        // The last MI's penalty (1.5 per Mbit/s) is about what its rate earns (x^(t−1) ≈
        // 0.85): jitter on a clean path. Both pairs vote up, so the flow goes up.
        let mut batch = noisy_overload_batch();
        batch[3] = penalised(5.25e6, 1.5);
        let mut rc = probing_at(5e6, ProbingRule::Scavenger);
        rc.on_batch(&batch, &S, id);
        assert!(rc.rate_bps() > 5.25e6, "rate {}", rc.rate_bps());
    }

    #[test]
    fn primaries_and_clean_paths_keep_the_votes() {
        // A primary follows its 3-pair votes (2 of 3 up) under the same penalties.
        let mut p = probing_at(5e6, ProbingRule::Primary);
        let [a, b, c, d] = noisy_overload_batch();
        p.on_batch(
            &[a, b, c, d, penalised(5.25e6, 20.0), penalised(4.75e6, 40.0)],
            &P,
            id,
        );
        assert!(p.rate_bps() > 5.25e6, "rate {}", p.rate_bps());
        // A scavenger with penalties below the marginal reward follows its votes up.
        let mut s = probing_at(5e6, ProbingRule::Scavenger);
        let light = [
            penalised(5.25e6, 0.1),
            penalised(4.75e6, 0.3),
            penalised(4.75e6, 0.3),
            penalised(5.25e6, 0.1),
        ];
        s.on_batch(&light, &S, id);
        assert!(s.rate_bps() > 5.25e6, "rate {}", s.rate_bps());
    }

    #[test]
    fn a_swamped_scavenger_mi_ends_the_batch_at_what_the_path_delivered() {
        // 10 % loss at 40 Mbit/s: 11.35·40·0.1 = 45 > 40^0.9 ≈ 27.6.
        let mut rc = probing_at::<f64>(40e6, ProbingRule::Scavenger);
        assert!(rc.on_swamped_mi(42e6, 0.10, &S));
        rate_eq(rc.rate_bps(), 37.8e6);
        assert_eq!(rc.k(), 0);
        assert!(matches!(rc.mode(), Mode::Probing { .. }));
        // What the path delivered is above the rate in force: the rate is never raised.
        let mut rc = probing_at::<f64>(30e6, ProbingRule::Scavenger);
        assert!(rc.on_swamped_mi(42e6, 0.10, &S));
        rate_eq(rc.rate_bps(), 30e6);
    }

    #[test]
    fn light_loss_starting_and_primaries_keep_their_batch() {
        // 2 % at 40 Mbit/s: 9.1 < 27.6, the utility decides as usual.
        let mut rc = probing_at::<f64>(40e6, ProbingRule::Scavenger);
        assert!(!rc.on_swamped_mi(42e6, 0.02, &S));
        rate_eq(rc.rate_bps(), 40e6);
        let mut p = probing_at::<f64>(40e6, ProbingRule::Primary);
        assert!(!p.on_swamped_mi(42e6, 0.30, &P));
        rate_eq(p.rate_bps(), 40e6);
        let mut s = RateControl::<f64>::new(40e6);
        assert!(!s.on_swamped_mi(40e6, 0.30, &S));
        rate_eq(s.rate_bps(), 40e6);
    }

    #[test]
    fn amplifier_is_integer_floored() {
        let m: Vec<f64> = (1..=7).map(confidence_amplifier).collect();
        let want = [
            1.0, 1.0, 2.2973967, 2.2973967, 3.7371928, 3.7371928, 5.2780316,
        ];
        for (g, w) in m.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{g} vs {w}");
        }
    }

    #[test]
    fn r9_minimum_step_and_minimum_rate() {
        // At 2 Mbit/s a 50 kbit/s step is below the 100 kbit/s boundary and floored to 500k.
        let mut rc: RateControl<f64> = probing_at(2e6, ProbingRule::Primary);
        assert_eq!(rc.bounded_step(50_000.0), 500_000.0);
        assert_eq!(rc.k(), 0);
        // Moving down from 0.8 Mbit/s by 500k gives 0.3 → clamped to 0.5, PROBING.
        let mut rc = RateControl {
            mode: Mode::Moving {
                dir: Direction::Down,
                reference: mi(1.3e6, 1.0),
            },
            rate_bps: 0.8e6,
            rounds: 1,
            k: 0,
            over_primary_queue: false,
        };
        rc.on_batch(&[mi(0.8e6, 1.1)], &P, id);
        assert_eq!(rc.rate_bps(), MIN_RATE_BPS);
        assert_eq!((rc.rounds(), rc.k()), (1, 0));
        assert!(matches!(rc.mode(), Mode::Probing { .. }));
    }

    #[test]
    fn stuck_at_minimum_rate_restarts() {
        let mut rc = probing_at(MIN_RATE_BPS, ProbingRule::Scavenger);
        let split = [
            mi(0.525e6, 1.0),
            mi(0.475e6, 0.5),
            mi(0.475e6, 1.0),
            mi(0.525e6, 0.5),
        ];
        rc.on_batch(&split, &S, id);
        assert_eq!(rc.mode(), &Mode::Starting { reference: None });
        assert_eq!(rc.rate_bps(), MIN_RATE_BPS);
    }

    #[test]
    fn room_found_at_minimum_rate_restarts() {
        for (rule, f, pairs) in [
            (ProbingRule::Scavenger, &S, 2),
            (ProbingRule::Primary, &P, 3),
        ] {
            // Every pair's higher probe scores higher: a round that votes "up".
            let up = |centre: f64| -> Vec<_> {
                (0..pairs)
                    .flat_map(|_| [mi(centre * 1.05, 1.0), mi(centre * 0.95, 0.5)])
                    .collect()
            };
            let mut rc = probing_at(MIN_RATE_BPS, rule);
            rc.on_batch(&up(MIN_RATE_BPS), f, id);
            assert_eq!(rc.mode(), &Mode::Starting { reference: None });
            assert_eq!(rc.rate_bps(), MIN_RATE_BPS);
            // Above the minimum the same votes move up in a step.
            let mut rc = probing_at(2e6, rule);
            rc.on_batch(&up(2e6), f, id);
            assert!(matches!(
                rc.mode(),
                Mode::Moving {
                    dir: Direction::Up,
                    ..
                }
            ));
        }
    }

    #[test]
    fn switch_aborts_probing_and_resets_moving_confidence() {
        let mut rc = probing_at(20e6, ProbingRule::Primary);
        assert!(rc.on_utility_change(&S));
        assert_eq!(rc.batch_len(), 4);
        assert_eq!(rc.rate_bps(), 20e6);
        // A six-MI batch of the aborted round is dropped, not misread.
        assert_eq!(rc.on_batch(&r2_batch(), &S, id), Outcome::Dropped);
        assert!(!rc.on_utility_change(&S));
        let mut rc = probing_at(20e6, ProbingRule::Primary);
        rc.on_batch(&r2_batch(), &P, id);
        rc.on_batch(&[mi(21.5e6, 15.80)], &P, id);
        rc.on_batch(&[mi(22_379_609.3, 16.60)], &P, id);
        assert_eq!((rc.rounds(), rc.k()), (3, 1));
        assert!(!rc.on_utility_change(&S));
        assert_eq!((rc.rounds(), rc.k()), (1, 0));
        assert!(matches!(rc.mode(), Mode::Moving { .. }));
    }

    #[test]
    fn plan_pairs_opposite_probes() {
        let rc = probing_at::<f64>(20e6, ProbingRule::Primary);
        let mut flips = [true, false, true].into_iter();
        let (rates, hold) = rc.plan(|| flips.next().unwrap_or(false));
        assert_eq!(hold, 20e6);
        let up = 20e6 * 1.05;
        let down = 20e6 * 0.95;
        assert_eq!(rates, vec![up, down, down, up, up, down]);
    }

    #[test]
    fn timeout_halves_and_probes() {
        let mut rc: RateControl<f64> = RateControl::new(8e6);
        rc.on_timeout(&S);
        assert_eq!(rc.rate_bps(), 4e6);
        assert_eq!(rc.batch_len(), 4);
    }
}
