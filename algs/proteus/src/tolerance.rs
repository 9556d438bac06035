//! Noise tolerance (docs/algorithms/proteus.md §1.6): which MIs have their RTT gradient and RTT
//! deviation penalised. The state is per flow, updated once per evaluated MI in
//! chronological order, and kept across priority changes (§4).

use crate::monitor_interval::RttStats;
use crate::params::{
    DEVIATION_OUTLIER_FLOOR_US, DEVIATION_OUTLIER_GAIN, DEVIATION_RESET_RATIO, FILTER_ALPHA,
    FILTER_EPSILON, RTT_HISTORY_LEN, STARTING_GRADIENT_TOLERANCE_US, TRENDING_BAND_GAIN,
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

/// The per-flow noise-tolerance state.
#[derive(Debug, Clone, PartialEq)]
pub struct NoiseFilter {
    /// Mean RTT of the last MIs, µs, oldest first.
    history: VecDeque<f64>,
    trending: Trending,
    deviation: DeviationBaseline,
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
        }
    }
}

/// Least-squares slope of `ys` against 0, 1, 2, … (µs per MI).
fn slope(ys: &VecDeque<f64>) -> f64 {
    let n = ys.len() as f64;
    let x_mean = (n - 1.0) / 2.0;
    let y_mean = ys.iter().sum::<f64>() / n;
    let (num, den) = ys
        .iter()
        .enumerate()
        .fold((0.0, 0.0), |(num, den), (i, &y)| {
            let dx = i as f64 - x_mean;
            (num + dx * (y - y_mean), den + dx * dx)
        });
    if den > 0.0 { num / den } else { 0.0 }
}

impl NoiseFilter {
    /// Runs (a)–(e) of §1.6 on one MI. `error` is the MI's gradient error (e_UDT or e_LS),
    /// `starting` marks an MI sent in STARTING and `duration_us` is its D.
    pub fn evaluate(
        &mut self,
        stats: &RttStats,
        error: f64,
        starting: bool,
        duration_us: f64,
    ) -> Verdict {
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
        self.history.push_back(stats.mean_us);
        if self.history.len() == RTT_HISTORY_LEN {
            let tg = slope(&self.history);
            rules.trending_outlier = self.check_trending(tg);
            if rules.trending_outlier {
                inflation_tolerable &= tg <= 0.0;
                deviation_tolerable = false;
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
        // (d) STARTING ignores small gradients and every deviation.
        if starting && gradient.abs() < STARTING_GRADIENT_TOLERANCE_US / duration_us.max(1.0) {
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
            rules,
        }
    }

    /// (b) Returns true if the trending gradient `tg` is an outlier.
    fn check_trending(&mut self, tg: f64) -> bool {
        let t = &mut self.trending;
        t.ratio_inflated *= 1.0 - FILTER_ALPHA;
        if t.min < FILTER_EPSILON || tg.abs() < t.min / TRENDING_RESET_RATIO {
            t.avg = 0.0;
            t.min = tg.abs();
            t.dev = tg.abs();
            t.last = tg;
            return false;
        }
        let band = TRENDING_BAND_GAIN * t.dev;
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

    fn stats(mean: f64, dev: f64, g: f64) -> RttStats {
        RttStats {
            n: 10,
            mean_us: mean,
            dev_us: dev,
            gradient: g,
            error_udt: f64::NAN,
            error_ls: f64::NAN,
        }
    }

    fn close(got: f64, want: f64, tol: f64) {
        assert!((got - want).abs() <= tol, "got {got}, want {want}");
    }

    #[test]
    fn v3_noise_tolerance_sequence() {
        let mis = [
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
        let mut f = NoiseFilter::default();
        let mut verdicts = Vec::new();
        for (i, &(mean, dev, g)) in mis.iter().enumerate() {
            verdicts.push(f.evaluate(&stats(mean, dev, g), 0.01, false, 30_000.0));
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
    fn significant_gradient_is_penalised_jitter_is_not() {
        // (a) alone, before the history is full: V1-like trend vs V2-like jitter.
        let mut f = NoiseFilter::default();
        let v = f.evaluate(&stats(31400.0, 902.77, 0.0964), 0.0287, false, 30_000.0);
        assert!(!v.inflation_tolerable && !v.deviation_tolerable);
        assert_eq!((v.gradient, v.rtt_dev_us), (0.0964, 902.77));
        assert_eq!(
            v.rules,
            Rules {
                significant: true,
                ..Rules::default()
            }
        );
        let v = f.evaluate(&stats(30000.0, 935.4, -0.0179), 0.0312, false, 30_000.0);
        assert!(v.inflation_tolerable && v.deviation_tolerable);
        assert_eq!((v.gradient, v.rtt_dev_us), (0.0, 0.0));
        assert_eq!(v.rules, Rules::default());
    }

    #[test]
    fn starting_rule_ignores_small_gradient_and_all_deviation() {
        // §5.1: D = 30,000 µs, g = 0.03 judged intolerable: 0.03 < 1000/30000 → g_eff = 0.
        let mut f = NoiseFilter::default();
        let v = f.evaluate(&stats(30000.0, 2000.0, 0.03), 0.001, true, 30_000.0);
        assert!(!v.inflation_tolerable);
        assert_eq!((v.gradient, v.rtt_dev_us), (0.0, 0.0));
        // A gradient above the threshold still counts (R1's overshooting MI).
        let v = f.evaluate(&stats(30000.0, 2000.0, 0.1947), 0.001, true, 30_000.0);
        assert_eq!((v.gradient, v.rtt_dev_us), (0.1947, 0.0));
    }

    #[test]
    fn lasting_deviation_jump_becomes_the_baseline() {
        let mut f = NoiseFilter::default();
        for _ in 0..6 {
            f.evaluate(&stats(30000.0, 500.0, 0.0), 1.0, false, 30_000.0);
        }
        let mut penalised = 0;
        for _ in 0..40 {
            if !f
                .evaluate(&stats(30000.0, 5000.0, 0.0), 1.0, false, 30_000.0)
                .deviation_tolerable
            {
                penalised += 1;
            }
        }
        // 29 outliers, then the baseline is re-learned and 5 ms of jitter is tolerated.
        assert_eq!(penalised, 29);
    }
}
