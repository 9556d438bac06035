//! Noise tolerance (docs/algorithms/proteus.md §1.6): which MIs have their RTT gradient and RTT
//! deviation penalised. The state is per flow, updated once per evaluated MI in
//! chronological order, and kept across priority changes (§4).

use crate::monitor_interval::MiMeasurement;
use crate::params::{
    DEVIATION_OUTLIER_FLOOR_US, DEVIATION_OUTLIER_GAIN, DEVIATION_RESET_RATIO, FILTER_ALPHA,
    FILTER_EPSILON, HEAVY_LOSS, LASTING_QUEUE_GAIN, LASTING_QUEUE_SHARE, LOSS_MEMORY_US,
    LOSS_NOISE_GAIN, OWN_LOSS_LOOKBACK, OWN_RISE_GAIN, RTT_HISTORY_LEN, STANDING_QUEUE_FLOOR_US,
    STANDING_QUEUE_FRACTION, STARTING_GRADIENT_TOLERANCE_US, TREND_NOISE_GAIN, TRENDING_BAND_GAIN,
    TRENDING_RESET_RATIO,
};
use std::collections::VecDeque;

/// The verdict on one MI.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// The RTT gradient is not penalised (§1.6a, b).
    pub inflation_tolerable: bool,
    /// The RTT deviation is not penalised (§1.6a, b, c).
    pub deviation_tolerable: bool,
    /// g_eff: 0 when tolerated or (STARTING) small, never negative (§1.6d, e).
    pub gradient: f64,
    /// σ_eff, µs: 0 when tolerated or STARTING (§1.6d).
    pub rtt_dev_us: f64,
    /// L_eff: the MI's loss rate, in STARTING less its sampling noise (§1.6d).
    pub loss: f64,
    /// The MI's mean RTT stood over a queue (not in UDT; [`stands_over_queue`]).
    pub queued: bool,
    /// Which rules fired, for the flow trace.
    pub rules: Rules,
}

/// The rules of §1.6 that found something in one MI: (a) a significant trend, (b) a trending
/// outlier, (c) a deviation outlier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rules {
    pub significant: bool,
    pub trending_outlier: bool,
    pub deviation_outlier: bool,
}

/// Trending-gradient baseline (§1.6b). All values µs per MI; −1 means unset.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Trending {
    avg: f64,
    dev: f64,
    min: f64,
    last: f64,
    /// Outlier counter; decays by 0.9 per MI. UDT's reset on it is commented out, so it
    /// only shows in the flow trace.
    ratio_inflated: f64,
}

/// RTT-deviation baseline (§1.6c), µs; −1 means unset.
#[derive(Debug, Clone, Copy, PartialEq)]
struct DeviationBaseline {
    avg: f64,
    dev: f64,
    ratio_fluct: f64,
}

/// One MI's mean RTT and how precisely its samples give it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct MeanRtt {
    /// r̄, µs.
    mean_us: f64,
    /// Variance of r̄ from the MI's own samples, σ²/n, µs².
    variance_us2: f64,
}

/// One MI as the loss memory reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct RateStep {
    x_mbps: f64,
    /// The MI's queue is the flow's own: its RTT rose significantly, without heavy loss, no
    /// faster than its step up over the MI before it explains ([`OWN_RISE_GAIN`]), or its
    /// heavy loss was the flow's own (an overflow lasts a few MIs).
    own: bool,
}

/// The per-flow noise-tolerance state.
#[derive(Debug, Clone, PartialEq)]
pub struct NoiseFilter {
    /// Mean RTT of the last MIs, oldest first.
    history: VecDeque<MeanRtt>,
    trending: Trending,
    deviation: DeviationBaseline,
    /// Flow time (sum of MI durations, µs) left before a heavy loss is forgotten.
    loss_memory_us: f64,
    /// The last MIs, oldest first, for telling the flow's own losses from a primary's.
    steps: VecDeque<RateStep>,
    /// Share of recent MIs that stood over a queue (an EWMA of the one-MI test).
    queue_persistence: f64,
}

impl Default for NoiseFilter {
    fn default() -> Self {
        NoiseFilter {
            history: VecDeque::with_capacity(RTT_HISTORY_LEN),
            trending: Trending {
                avg: -1.0,
                dev: -1.0,
                min: -1.0,
                last: -1.0,
                ratio_inflated: 0.0,
            },
            deviation: DeviationBaseline {
                avg: -1.0,
                dev: -1.0,
                ratio_fluct: 0.0,
            },
            loss_memory_us: 0.0,
            steps: VecDeque::with_capacity(OWN_LOSS_LOOKBACK),
            queue_persistence: 0.0,
        }
    }
}

/// Least-squares slope of the means against 0, 1, 2, … (µs per MI), and its standard
/// error from the means' own variances (the slope is Σ wᵢ·r̄ᵢ with wᵢ = (i − ī)/Σ(i − ī)²,
/// so its variance is Σ wᵢ²·σᵢ²/nᵢ).
fn slope(ys: &VecDeque<MeanRtt>) -> (f64, f64) {
    let n = ys.len() as f64;
    let x_mean = (n - 1.0) / 2.0;
    let den: f64 = (0..ys.len()).map(|i| (i as f64 - x_mean).powi(2)).sum();
    if den <= 0.0 {
        return (0.0, 0.0);
    }
    let (tg, variance) = ys.iter().enumerate().fold((0.0, 0.0), |(tg, var), (i, y)| {
        let w = (i as f64 - x_mean) / den;
        (tg + w * y.mean_us, var + w * w * y.variance_us2)
    });
    (tg, variance.sqrt())
}

/// The part of a loss rate `loss`, measured on `resolved` packets, that stands out of its
/// binomial sampling noise: L − k·sqrt(L(1 − L)/N), at least 0 (k =
/// [`LOSS_NOISE_GAIN`]). With k = 2 up to 3 losses in an MI are noise; a buffer that
/// overflows at twice the link's rate loses far more.
pub fn beyond_sampling_noise(loss: f64, resolved: u64) -> f64 {
    if resolved == 0 {
        return loss;
    }
    let noise = (loss * (1.0 - loss) / resolved as f64).max(0.0).sqrt();
    (loss - LOSS_NOISE_GAIN * noise).max(0.0)
}

/// Not in UDT: the loss rates two compared MIs are scored with, from each MI's (loss rate,
/// packets it is measured on). Where the two differ by no more than
/// [`LOSS_NOISE_GAIN`] standard errors of their difference (a two-proportion test
/// on the pooled rate), both get the pooled rate: which of two MIs a few losses fell into
/// is chance, and with a buffer of a few packets one loss decided a ±5 % probe pair by more
/// than the rate difference earns. The pooled rate keeps the penalty's level, so the loss
/// rate at which the utility stops growing with the rate (§1.2) does not move.
pub fn compared_losses(a: (f64, u64), b: (f64, u64)) -> (f64, f64) {
    let ((la, na), (lb, nb)) = (a, b);
    if na == 0 || nb == 0 {
        return (la, lb);
    }
    let (na, nb) = (na as f64, nb as f64);
    let pooled = (la * na + lb * nb) / (na + nb);
    let noise = (pooled * (1.0 - pooled) * (1.0 / na + 1.0 / nb))
        .max(0.0)
        .sqrt();
    if (la - lb).abs() <= LOSS_NOISE_GAIN * noise {
        (pooled, pooled)
    } else {
        (la, lb)
    }
}

/// Whether a mean RTT of `mean_us` stands a queue above the flow's smallest RTT
/// `min_rtt_us` (not in UDT): [`STANDING_QUEUE_FLOOR_US`] above it, or
/// [`STANDING_QUEUE_FRACTION`] of it if that is more.
pub fn stands_over_queue(mean_us: f64, min_rtt_us: Option<f64>) -> bool {
    let Some(min) = min_rtt_us.filter(|&m| m > 0.0) else {
        return false;
    };
    mean_us - min >= STANDING_QUEUE_FLOOR_US.max(STANDING_QUEUE_FRACTION * min)
}

/// Weight of one MI in the lasting-queue share (not in UDT): [`LASTING_QUEUE_GAIN`] per
/// base RTT that its mean RTT `mean_us` spans. A queue that stretches the RTT stretches the
/// time between a flow's decisions as much, so counted in MIs a deep queue would seem to
/// last a fraction of the time it does (a 300 ms queue on a 200 ms path: 2.5 times less).
fn lasting_queue_weight(mean_us: f64, min_rtt_us: Option<f64>) -> f64 {
    let rtts = min_rtt_us
        .filter(|&m| m > 0.0)
        .map_or(1.0, |min| (mean_us / min).max(1.0));
    (LASTING_QUEUE_GAIN * rtts).min(1.0)
}

impl NoiseFilter {
    /// Runs (a)–(e) of §1.6 on one MI `m`. `error` is its gradient error (e_UDT or e_LS),
    /// `starting` marks an MI sent in STARTING and `min_rtt_us` is the flow's smallest RTT
    /// so far.
    pub fn evaluate(
        &mut self,
        m: &MiMeasurement,
        error: f64,
        starting: bool,
        min_rtt_us: Option<f64>,
    ) -> Verdict {
        let stats = &m.stats;
        // (a) significance: penalise only a trend that stands out of the MI's own spread.
        let mut rules = Rules {
            significant: error < stats.gradient.abs(),
            ..Rules::default()
        };
        let mut inflation_tolerable = !rules.significant;
        let mut deviation_tolerable = !rules.significant;

        if self.history.len() == RTT_HISTORY_LEN {
            self.history.pop_front();
        }
        self.history.push_back(MeanRtt {
            mean_us: stats.mean_us,
            variance_us2: stats.dev_us * stats.dev_us / stats.n.max(1) as f64,
        });
        let queued = stands_over_queue(stats.mean_us, min_rtt_us);
        let weight = lasting_queue_weight(stats.mean_us, min_rtt_us);
        self.queue_persistence += weight * (f64::from(u8::from(queued)) - self.queue_persistence);
        let primary_shows = self.remember_loss(m, rules.significant, starting)
            || self.over_standing_queue(min_rtt_us);
        let noise_gain = if primary_shows { 0.0 } else { TREND_NOISE_GAIN };
        if self.history.len() == RTT_HISTORY_LEN {
            let (tg, tg_error) = slope(&self.history);
            rules.trending_outlier = self.check_trending(tg, noise_gain * tg_error);
            if rules.trending_outlier {
                inflation_tolerable &= tg <= 0.0;
                // Not in UDT: where no primary shows, a falling trend is a queue draining,
                // the flow's own or an equal's, which is no reason to price its jitter.
                deviation_tolerable &= tg < 0.0 && !primary_shows;
            }
            rules.deviation_outlier = self.check_deviation(stats.dev_us);
            if rules.deviation_outlier {
                deviation_tolerable = false;
            }
        }

        let mut gradient = if inflation_tolerable {
            0.0
        } else {
            stats.gradient
        };
        // (d) STARTING ignores small gradients and every deviation; also, not in UDT, a
        // gradient within the noise of the MI's own samples, so that one noisy MI of a few
        // samples does not end STARTING at a fraction of the link.
        let forgiven = (STARTING_GRADIENT_TOLERANCE_US / m.duration_us.max(1.0))
            .max(noise_gain * stats.gradient_se);
        if starting && gradient.abs() < forgiven {
            gradient = 0.0;
        }
        let rtt_dev_us = if deviation_tolerable || starting {
            0.0
        } else {
            stats.dev_us
        };
        Verdict {
            inflation_tolerable,
            deviation_tolerable,
            // (e) negative gradients are never rewarded.
            gradient: gradient.max(0.0),
            rtt_dev_us,
            loss: if starting {
                beyond_sampling_noise(m.loss, m.resolved)
            } else {
                m.loss
            },
            queued,
            rules,
        }
    }

    /// Whether an MI lost more than [`HEAVY_LOSS`] within the last [`LOSS_MEMORY_US`] of
    /// flow time (not in UDT). Alone or among their own kind, scavengers with a buffer of
    /// more than a few packets lose next to nothing; a loss-based primary drops packets
    /// once per epoch, and at half a BDP or less its queue drains between losses, so the
    /// queue alone does not show it. A loss that follows the flow's own step over the link
    /// ([`OWN_RISE_GAIN`]) is not remembered: at 0.2 BDP a lone flow overflows the buffer
    /// itself, and under UDT's rules it held less of the link. Nor is one in an MI sent in
    /// STARTING (`starting`): the rate doubles each MI there, and where the buffer holds less
    /// than the doubling's excess over one MI the overflow falls into the doubled MI itself.
    fn remember_loss(&mut self, m: &MiMeasurement, significant: bool, starting: bool) -> bool {
        let heavy = m.loss > HEAVY_LOSS;
        let own_loss =
            heavy && (starting || self.steps.iter().any(|s| s.own && s.x_mbps >= m.x_mbps));
        self.loss_memory_us = if heavy && !own_loss {
            LOSS_MEMORY_US
        } else {
            (self.loss_memory_us - m.duration_us).max(0.0)
        };
        let g = m.stats.gradient;
        let own_rise = !heavy
            && significant
            && g > 0.0
            && self
                .steps
                .back()
                .is_some_and(|p| g <= OWN_RISE_GAIN * (m.x_mbps / p.x_mbps - 1.0));
        if self.steps.len() == OWN_LOSS_LOOKBACK {
            self.steps.pop_front();
        }
        self.steps.push_back(RateStep {
            x_mbps: m.x_mbps,
            own: own_rise || own_loss,
        });
        self.loss_memory_us > 0.0
    }

    /// Whether the window's mean RTT stands a queue above the flow's minimum (not in UDT).
    /// Scavengers among their own kind or alone drain theirs; a standing queue is a
    /// primary's, and there UDT's rules keep their full sensitivity to a slowly growing
    /// queue, which the noise floor of (b) and (d) would hide.
    fn over_standing_queue(&self, min_rtt_us: Option<f64>) -> bool {
        let mean = self.history.iter().map(|y| y.mean_us).sum::<f64>() / self.history.len() as f64;
        stands_over_queue(mean, min_rtt_us)
    }

    /// Whether a queue stands now and has stood through most of the last MIs (not in UDT):
    /// a scavenger alone or among a few of its own kind drains its queue within a few MIs,
    /// so a queue that lasts is a primary's. Among seven or more equal flows the shared
    /// queue lasted that long now and then, and the rule took them all down together.
    pub fn over_lasting_queue(&self, min_rtt_us: Option<f64>) -> bool {
        self.queue_persistence >= LASTING_QUEUE_SHARE && self.over_standing_queue(min_rtt_us)
    }

    /// Flow time, µs, before the last heavy loss is forgotten, for the flow trace.
    pub fn loss_memory_us(&self) -> f64 {
        self.loss_memory_us
    }

    /// Share of recent MIs that stood over a queue, for the flow trace.
    pub fn queue_persistence(&self) -> f64 {
        self.queue_persistence
    }

    /// (b) Returns true if the trending gradient `tg` is an outlier: outside the band
    /// learned from earlier trends, which is never narrower than `noise` (not in UDT).
    fn check_trending(&mut self, tg: f64, noise: f64) -> bool {
        let t = &mut self.trending;
        t.ratio_inflated *= 1.0 - FILTER_ALPHA;
        if t.min < FILTER_EPSILON || tg.abs() < t.min / TRENDING_RESET_RATIO {
            t.avg = 0.0;
            t.min = tg.abs();
            t.dev = tg.abs();
            t.last = tg;
            return false;
        }
        let band = (TRENDING_BAND_GAIN * t.dev).max(noise);
        let outlier = tg < t.avg - band || tg > t.avg + band;
        if outlier {
            t.ratio_inflated += FILTER_ALPHA;
        } else {
            t.dev = (1.0 - FILTER_ALPHA) * t.dev + FILTER_ALPHA * (tg - t.last).abs();
            t.avg = (1.0 - FILTER_ALPHA) * t.avg + FILTER_ALPHA * tg;
            t.last = tg;
        }
        t.min = t.min.min(tg.abs());
        outlier
    }

    /// (c) Returns true if the MI's deviation `sigma` is an outlier.
    fn check_deviation(&mut self, sigma: f64) -> bool {
        let d = &mut self.deviation;
        d.ratio_fluct *= 1.0 - FILTER_ALPHA;
        let mut outlier = false;
        if d.avg < FILTER_EPSILON {
            d.avg = sigma;
            d.dev = sigma / 2.0;
        } else if sigma > d.avg + DEVIATION_OUTLIER_GAIN * d.dev
            && sigma > DEVIATION_OUTLIER_FLOOR_US
        {
            outlier = true;
            d.ratio_fluct += FILTER_ALPHA;
        } else {
            d.dev = (1.0 - FILTER_ALPHA) * d.dev + FILTER_ALPHA * (sigma - d.avg).abs();
            d.avg = (1.0 - FILTER_ALPHA) * d.avg + FILTER_ALPHA * sigma;
        }
        if d.ratio_fluct > DEVIATION_RESET_RATIO {
            // A lasting jump in σ becomes the new baseline (≈ 29 outliers in a row).
            d.avg = -1.0;
            d.dev = -1.0;
            d.ratio_fluct = 0.0;
        }
        outlier
    }

    /// Outlier counter of the deviation baseline, for the flow trace.
    pub fn ratio_fluct(&self) -> f64 {
        self.deviation.ratio_fluct
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor_interval::RttStats;

    /// An MI of 30 ms (26 packets at 10 Mbit/s) with these samples and loss rate.
    fn mi(stats: RttStats, loss: f64) -> MiMeasurement {
        MiMeasurement {
            target_bps: 10e6,
            duration_us: 30_000.0,
            x_mbps: 10.0,
            rate_limited: false,
            loss,
            resolved: 26,
            stats,
        }
    }

    fn stats(mean: f64, dev: f64, g: f64) -> RttStats {
        stats_of(10, mean, dev, g)
    }

    fn stats_of(n: u64, mean: f64, dev: f64, g: f64) -> RttStats {
        RttStats {
            n,
            mean_us: mean,
            dev_us: dev,
            gradient: g,
            error_udt: f64::NAN,
            error_ls: f64::NAN,
            gradient_se: 0.0,
        }
    }

    fn close(got: f64, want: f64, tol: f64) {
        assert!((got - want).abs() <= tol, "got {got}, want {want}");
    }

    /// Vector V3's MIs: (r̄ µs, σ µs, g).
    const V3: [(f64, f64, f64); 9] = [
        (30000.0, 800.0, 0.001),
        (30100.0, 900.0, 0.002),
        (29900.0, 700.0, -0.001),
        (30050.0, 800.0, 0.0),
        (30000.0, 800.0, 0.001),
        (30100.0, 800.0, 0.002),
        (30000.0, 900.0, 0.001),
        (30300.0, 3000.0, 0.004),
        (30100.0, 1200.0, -0.002),
    ];

    #[test]
    fn v3_noise_tolerance_sequence() {
        // V3 takes the means as exact, as UDT's rule does: with 10^5 samples per MI their
        // standard errors keep the band's noise floor (§1.6b, not in UDT) below UDT's band.
        let mut f = NoiseFilter::default();
        let mut verdicts = Vec::new();
        for (i, &(mean, dev, g)) in V3.iter().enumerate() {
            verdicts.push(f.evaluate(&mi(stats_of(100_000, mean, dev, g), 0.0), 0.01, false, None));
            match i + 1 {
                6 => {
                    // tg = 10 → reset; deviation baseline initialised.
                    assert_eq!(
                        (f.trending.avg, f.trending.dev, f.trending.min),
                        (0.0, 10.0, 10.0)
                    );
                    close(f.trending.last, 10.0, 1e-9);
                    assert_eq!((f.deviation.avg, f.deviation.dev), (800.0, 400.0));
                }
                7 => {
                    close(f.trending.last, 1.4285714285714286, 1e-9);
                    close(f.trending.avg, 0.14285714285714285, 1e-9);
                    close(f.trending.dev, 9.857142857142858, 1e-9);
                    close(f.trending.min, 1.4285714285714286, 1e-9);
                    close(f.deviation.avg, 810.0, 1e-9);
                    close(f.deviation.dev, 370.0, 1e-9);
                }
                8 => {
                    // tg = 55.714 is outside [−19.571, 19.857]: nothing updated.
                    close(f.trending.avg, 0.14285714285714285, 1e-9);
                    close(f.deviation.avg, 810.0, 1e-9);
                }
                9 => {
                    close(f.deviation.avg, 849.0, 1e-9);
                    close(f.deviation.dev, 372.0, 1e-9);
                    close(f.ratio_fluct(), 0.09, 1e-12);
                }
                _ => {}
            }
        }
        for (i, v) in verdicts.iter().enumerate() {
            let tolerable = i < 7;
            assert_eq!(v.inflation_tolerable, tolerable, "MI {}", i + 1);
            assert_eq!(v.deviation_tolerable, tolerable, "MI {}", i + 1);
        }
        // MI 8's spike is a trending (b) and a deviation (c) outlier; still in the 6-MI
        // window, it makes MI 9 a trending outlier too; neither is significant by (a).
        let r = |i: usize| verdicts[i].rules;
        assert!(r(7).trending_outlier && r(7).deviation_outlier && !r(7).significant);
        assert!(r(8).trending_outlier && !r(8).deviation_outlier && !r(8).significant);
        // MI 8: both penalised; MI 9's negative gradient is still clipped to 0.
        assert_eq!(
            (verdicts[7].gradient, verdicts[7].rtt_dev_us),
            (0.004, 3000.0)
        );
        assert_eq!(
            (verdicts[8].gradient, verdicts[8].rtt_dev_us),
            (0.0, 1200.0)
        );
    }

    #[test]
    fn a_trend_within_its_means_own_noise_is_no_trending_outlier() {
        // V3 with 10 samples per MI: MI 8's mean (σ = 3 ms, so ±0.95 ms) moves the 6-MI
        // trend by less than three of its standard errors. MI 8 is still penalised, for
        // its deviation (c); MI 9 no longer is, for a spike that is still in the window.
        let mut f = NoiseFilter::default();
        let v: Vec<Verdict> = V3
            .iter()
            .map(|&(mean, dev, g)| {
                f.evaluate(&mi(stats_of(10, mean, dev, g), 0.0), 0.01, false, None)
            })
            .collect();
        assert!(v.iter().all(|v| !v.rules.trending_outlier));
        assert!(v[7].rules.deviation_outlier && !v[7].deviation_tolerable);
        assert!(v[8].deviation_tolerable && v[8].inflation_tolerable);
        // A queue that grows by 1 ms per MI stands out of the same noise.
        let mut f = NoiseFilter::default();
        let rising: Vec<Verdict> = (0..12)
            .map(|i| {
                let mean = if i < 8 {
                    30_000.0
                } else {
                    30_000.0 + 1000.0 * (i - 7) as f64
                };
                f.evaluate(&mi(stats_of(10, mean, 800.0, 0.0), 0.0), 0.01, false, None)
            })
            .collect();
        assert!(rising[..8].iter().all(|v| !v.rules.trending_outlier));
        assert!(
            rising[9..]
                .iter()
                .all(|v| v.rules.trending_outlier && !v.inflation_tolerable)
        );
    }

    #[test]
    fn a_draining_queue_is_no_reason_to_price_jitter_unless_a_primary_shows() {
        // A 30 ms path: 8 MIs at the minimum, a queue of 2.4 ms, then 0.8 ms less each MI.
        // From MI 12 the six-MI trend falls and is an outlier either way; alone (no queue
        // stands over the six MIs) the drain leaves σ unpriced, over a primary's standing
        // queue it does not.
        let verdicts = |base: f64| -> Vec<Verdict> {
            let mut f = NoiseFilter::default();
            (0..16)
                .map(|i| {
                    let queue = match i {
                        0..8 => 0.0,
                        _ => (2400.0 - 800.0 * (i - 8) as f64).max(0.0),
                    };
                    // Whole-ms delivery: the means wander by a few hundred µs.
                    let jitter = [0.0, 300.0, -200.0, 100.0][i % 4];
                    let mean = base + queue + jitter;
                    f.evaluate(
                        &mi(stats_of(40, mean, 500.0, 0.0), 0.0),
                        0.01,
                        false,
                        Some(30_000.0),
                    )
                })
                .collect()
        };
        // The MIs from 12 on that (b) flags.
        let falling = |v: Vec<Verdict>| -> Vec<Verdict> {
            v[12..]
                .iter()
                .copied()
                .filter(|v| v.rules.trending_outlier)
                .collect()
        };
        let alone = falling(verdicts(30_000.0));
        assert!(!alone.is_empty());
        assert!(
            alone
                .iter()
                .all(|v| v.deviation_tolerable && v.rtt_dev_us == 0.0)
        );
        let beside_primary = falling(verdicts(36_000.0));
        assert!(!beside_primary.is_empty());
        assert!(
            beside_primary
                .iter()
                .all(|v| !v.deviation_tolerable && v.rtt_dev_us == 500.0)
        );
    }

    #[test]
    fn over_a_standing_queue_the_trend_keeps_udts_band() {
        // The same V3 means, 10 samples per MI, but 5 ms above the flow's minimum: a
        // primary's queue. MI 8's spike is then a trending outlier again, as in UDT (V3).
        let trending = |min_rtt_us: f64| -> Vec<bool> {
            let mut f = NoiseFilter::default();
            V3.iter()
                .map(|&(mean, dev, g)| {
                    f.evaluate(
                        &mi(stats_of(10, mean, dev, g), 0.0),
                        0.01,
                        false,
                        Some(min_rtt_us),
                    )
                    .rules
                    .trending_outlier
                })
                .collect()
        };
        let standing = trending(25_000.0);
        assert!(standing[7] && standing[8], "{standing:?}");
        // 1 ms above the minimum (below the 3 ms a 30 ms path counts as standing): the
        // noise floor holds and nothing is an outlier.
        assert!(trending(29_000.0).iter().all(|&t| !t));
    }

    #[test]
    fn only_a_queue_that_lasts_is_a_primarys() {
        // 30 ms path; MIs whose mean RTT stands 5 ms above it or does not.
        let min = Some(30_000.0);
        let feed = |f: &mut NoiseFilter, queued: bool| {
            let mean = if queued { 35_000.0 } else { 30_500.0 };
            f.evaluate(&mi(stats(mean, 500.0, 0.0), 0.0), 0.01, false, min);
        };
        // A lone scavenger: a queue now and then, a few MIs at a time (13 % of its MIs).
        let mut alone = NoiseFilter::default();
        for i in 0..390 {
            feed(&mut alone, i % 30 >= 26);
        }
        assert!(alone.over_standing_queue(min), "its queue stands now");
        assert!(
            !alone.over_lasting_queue(min),
            "{}",
            alone.queue_persistence()
        );
        // Beside CUBIC: the queue stands in most MIs and drains at each backoff.
        let mut beside = NoiseFilter::default();
        for i in 0..60 {
            feed(&mut beside, i % 30 >= 4);
            if i == 20 {
                assert!(!beside.over_lasting_queue(min), "not after 16 MIs");
            }
        }
        assert!(
            beside.over_lasting_queue(min),
            "{}",
            beside.queue_persistence()
        );
        // Six MIs after it drained, the six-MI test no longer holds.
        for _ in 0..6 {
            feed(&mut beside, false);
        }
        assert!(!beside.over_lasting_queue(min));
    }

    #[test]
    fn a_deep_queue_lasts_in_base_rtts_not_in_mis() {
        // 200 ms path: a primary's 300 ms queue stretches each MI's RTT 2.5 times, a queue
        // at the standing line (20 ms) hardly at all.
        let min = Some(200_000.0);
        let mis_until_lasting = |mean: f64| {
            let mut f = NoiseFilter::default();
            (1..=100)
                .find(|_| {
                    f.evaluate(&mi(stats(mean, 500.0, 0.0), 0.0), 0.01, false, min);
                    f.over_lasting_queue(min)
                })
                .expect("a queue in every MI lasts")
        };
        let deep = mis_until_lasting(500_000.0);
        let shallow = mis_until_lasting(221_000.0);
        assert!(deep <= 12, "{deep} MIs");
        assert!(shallow >= 27, "{shallow} MIs");
    }

    #[test]
    fn after_a_heavy_loss_the_trend_keeps_udts_band_for_a_while() {
        // V3 with 10 samples per MI, no standing queue: MI 8's spike stands out again when
        // an MI lost 2 % of its packets within the last 10 s, and not after 1 %, nor once
        // 10 s of MIs without heavy loss have passed.
        let trending = |first_loss: f64, quiet_mis: usize| -> Vec<bool> {
            let mut f = NoiseFilter::default();
            let mi = |f: &mut NoiseFilter, (mean, dev, g): (f64, f64, f64), loss: f64| {
                f.evaluate(&mi(stats_of(10, mean, dev, g), loss), 0.01, false, None)
                    .rules
                    .trending_outlier
            };
            mi(&mut f, V3[0], first_loss);
            for _ in 0..quiet_mis {
                mi(&mut f, V3[0], 0.0);
            }
            V3.iter().map(|&v| mi(&mut f, v, 0.0)).collect()
        };
        let remembered = trending(0.02, 300);
        assert!(remembered[7] && remembered[8], "{remembered:?}");
        assert!(trending(0.01, 300).iter().all(|&t| !t));
        assert!(trending(0.02, 340).iter().all(|&t| !t));
    }

    /// The loss memory after MIs of (x Mbit/s, RTT gradient, loss) with the given mean RTT
    /// and deviation, all sent in STARTING or none.
    fn loss_memory_after(
        mean_us: f64,
        dev_us: f64,
        mis: &[(f64, f64, f64)],
        starting: bool,
    ) -> f64 {
        let mut f = NoiseFilter::default();
        for &(x, g, loss) in mis {
            let m = MiMeasurement {
                target_bps: x * 1e6,
                x_mbps: x,
                ..mi(stats(mean_us, dev_us, g), loss)
            };
            f.evaluate(&m, 0.01, starting, None);
        }
        f.loss_memory_us()
    }

    #[test]
    fn a_loss_after_the_flows_own_step_up_is_not_a_primarys() {
        // 10 Mbit/s flat, then the MIs given.
        let memory_after = |mis: &[(f64, f64, f64)]| {
            let all: Vec<_> = [(10.0, 0.0, 0.0)].iter().chain(mis).copied().collect();
            loss_memory_after(30_000.0, 800.0, &all, false)
        };
        // A 5 % step up explains a rise of up to 0.1: the overflow is the flow's own, and so
        // are the losses of the MIs after it while one of the last two was.
        let step = (10.5, 0.05, 0.0);
        assert_eq!(memory_after(&[step, (10.5, 0.0, 0.05)]), 0.0);
        let overflow = [
            step,
            (10.5, 0.0, 0.05),
            (10.0, -0.03, 0.05),
            (10.5, 0.0, 0.05),
        ];
        assert_eq!(memory_after(&overflow), 0.0);
        // A faster rise, a rise at a steady rate, the loss at a higher rate than the rise,
        // or after two MIs that were not the flow's own: somebody else's queue.
        assert_eq!(
            memory_after(&[(10.5, 0.2, 0.0), (10.5, 0.0, 0.05)]),
            LOSS_MEMORY_US
        );
        assert_eq!(
            memory_after(&[(10.0, 0.05, 0.0), (10.0, 0.0, 0.05)]),
            LOSS_MEMORY_US
        );
        assert_eq!(memory_after(&[step, (11.0, 0.0, 0.05)]), LOSS_MEMORY_US);
        let later = [step, (10.0, 0.0, 0.0), (10.0, 0.0, 0.0), (10.0, 0.0, 0.05)];
        assert_eq!(memory_after(&later), LOSS_MEMORY_US);
    }

    #[test]
    fn a_loss_in_startings_doubled_mi_is_the_flows_own() {
        // STARTING doubles 9.4 to 18.7 Mbit/s over a 12 Mbit/s link whose buffer holds ten
        // packets: the doubled MI rises and loses 13 % at once (measured at 10 ms).
        let doubled = |starting: bool| {
            let mis = [(9.4, 0.0, 0.0), (18.7, 0.39, 0.13)];
            loss_memory_after(12_000.0, 2_400.0, &mis, starting)
        };
        assert_eq!(doubled(true), 0.0);
        // The same MI outside STARTING steps up no more than a probe or a move does.
        assert_eq!(doubled(false), LOSS_MEMORY_US);
    }

    #[test]
    fn significant_gradient_is_penalised_jitter_is_not() {
        // (a) alone, before the history is full: V1-like trend vs V2-like jitter.
        let mut f = NoiseFilter::default();
        let v = f.evaluate(
            &mi(stats(31400.0, 902.77, 0.0964), 0.0),
            0.0287,
            false,
            None,
        );
        assert!(!v.inflation_tolerable && !v.deviation_tolerable);
        assert_eq!((v.gradient, v.rtt_dev_us), (0.0964, 902.77));
        assert_eq!(
            v.rules,
            Rules {
                significant: true,
                ..Rules::default()
            }
        );
        let v = f.evaluate(
            &mi(stats(30000.0, 935.4, -0.0179), 0.0),
            0.0312,
            false,
            None,
        );
        assert!(v.inflation_tolerable && v.deviation_tolerable);
        assert_eq!((v.gradient, v.rtt_dev_us), (0.0, 0.0));
        assert_eq!(v.rules, Rules::default());
    }

    #[test]
    fn starting_rule_ignores_small_gradient_and_all_deviation() {
        // §5.1: D = 30,000 µs, g = 0.03 judged intolerable: 0.03 < 1000/30000 → g_eff = 0.
        let mut f = NoiseFilter::default();
        let v = f.evaluate(&mi(stats(30000.0, 2000.0, 0.03), 0.0), 0.001, true, None);
        assert!(!v.inflation_tolerable);
        assert_eq!((v.gradient, v.rtt_dev_us), (0.0, 0.0));
        // A gradient above the threshold still counts (R1's overshooting MI).
        let v = f.evaluate(&mi(stats(30000.0, 2000.0, 0.1947), 0.0), 0.001, true, None);
        assert_eq!((v.gradient, v.rtt_dev_us), (0.1947, 0.0));
    }

    #[test]
    fn starting_forgives_a_gradient_within_the_regressions_noise() {
        // g = 0.05 is above 1000/D = 0.033, but within three standard errors of 0.02 (a
        // few noisy samples): forgiven. The same g measured to ±0.01 ends STARTING.
        let mut f = NoiseFilter::default();
        let noisy = RttStats {
            gradient_se: 0.02,
            ..stats(30000.0, 500.0, 0.05)
        };
        assert_eq!(f.evaluate(&mi(noisy, 0.0), 0.001, true, None).gradient, 0.0);
        let precise = RttStats {
            gradient_se: 0.01,
            ..noisy
        };
        assert_eq!(
            f.evaluate(&mi(precise, 0.0), 0.001, true, None).gradient,
            0.05
        );
    }

    #[test]
    fn starting_counts_only_the_loss_beyond_its_sampling_noise() {
        let mut f = NoiseFilter::default();
        let quiet = stats(30000.0, 100.0, 0.0);
        // 2 of 26 lost: 7.7 % ± 5.2 %, noise; 13 of 26 lost: an overflow, 50 % − 19.6 %.
        let two = 2.0 / 26.0;
        assert_eq!(f.evaluate(&mi(quiet, two), 0.001, true, None).loss, 0.0);
        let half = f.evaluate(&mi(quiet, 0.5), 0.001, true, None).loss;
        assert!((half - (0.5 - 2.0 * (0.25f64 / 26.0).sqrt())).abs() < 1e-12);
        // Past STARTING every loss counts, as in UDT.
        assert_eq!(f.evaluate(&mi(quiet, two), 0.001, false, None).loss, two);
    }

    #[test]
    fn the_loss_noise_shrinks_with_the_packets_it_is_measured_on() {
        assert_eq!(beyond_sampling_noise(0.05, 40), 0.0);
        let big = beyond_sampling_noise(0.05, 4000);
        assert!((big - (0.05 - 2.0 * (0.0475f64 / 4000.0).sqrt())).abs() < 1e-12);
        assert_eq!(beyond_sampling_noise(0.2, 0), 0.2);
        assert_eq!(beyond_sampling_noise(0.0, 30), 0.0);
    }

    #[test]
    fn compared_losses_pool_only_within_their_noise() {
        // One loss in 130 packets against none in 118: chance, both get 1/248.
        let pooled = 1.0 / 248.0;
        assert_eq!(
            compared_losses((1.0 / 130.0, 130), (0.0, 118)),
            (pooled, pooled)
        );
        // Ten against none: the higher rate overflows the buffer, kept apart.
        assert_eq!(
            compared_losses((10.0 / 130.0, 130), (0.0, 118)),
            (10.0 / 130.0, 0.0)
        );
        // An MI whose count is unknown (a STARTING one) is never pooled.
        assert_eq!(compared_losses((0.5, 0), (0.0, 100)), (0.5, 0.0));
        assert_eq!(compared_losses((0.0, 40), (0.0, 40)), (0.0, 0.0));
    }

    #[test]
    fn lasting_deviation_jump_becomes_the_baseline() {
        let mut f = NoiseFilter::default();
        for _ in 0..6 {
            f.evaluate(&mi(stats(30000.0, 500.0, 0.0), 0.0), 1.0, false, None);
        }
        let mut penalised = 0;
        for _ in 0..40 {
            if !f
                .evaluate(&mi(stats(30000.0, 5000.0, 0.0), 0.0), 1.0, false, None)
                .deviation_tolerable
            {
                penalised += 1;
            }
        }
        // 29 outliers, then the baseline is re-learned and 5 ms of jitter is tolerated.
        assert_eq!(penalised, 29);
    }
}
