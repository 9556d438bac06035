//! The LEDBAT++ equations, one function each, in spec units (bytes as f64, time in µs).

use crate::params::{C_DECREASE, F_MAX, MD_CAP_FRACTION, SLOW_START_EXIT_FRACTION};
use algs_core::Micros;

/// GAIN divisor `F = min(16, ceil(2·T / base))` with the ordinary ceiling (docs/algorithms/ledbat-pp.md §2.2, REC;
/// TV-1 pins it). `None` while the base delay is unknown or zero (docs/algorithms/ledbat-pp.md §2.2 guard).
pub fn gain_divisor(target: Micros, base: Micros) -> Option<u64> {
    if base.0 == 0 {
        return None;
    }
    let two_t = target.0.saturating_mul(2);
    Some(two_t.div_ceil(base.0).clamp(1, F_MAX))
}

/// `q = max(0, current − base)` (docs/algorithms/ledbat-pp.md §1.3).
pub fn queuing_delay(current: Micros, base: Micros) -> Micros {
    current.since(base)
}

/// Whether the initial slow start ends: `q > 3/4·T`, strictly (draft §4.1; TV-6).
pub fn slow_start_delay_exit(q: Micros, target: Micros) -> bool {
    q.0 as f64 > SLOW_START_EXIT_FRACTION * target.0 as f64
}

/// Slow-start growth for one report: `G · acked` (draft §4.1).
pub fn slow_start_growth(gain: f64, acked: f64) -> f64 {
    gain * acked
}

/// Window change for one report in congestion avoidance (docs/algorithms/ledbat-pp.md §2.3–§2.4, per-report form):
/// with `a = min(acked, W)`,
///
/// * `q ≤ T`: `+G·MSS·a/W` (0 when the window is not used, `increase_allowed == false`);
/// * `q > T`: `max(G·MSS·a/W − C·(q/T − 1)·a, −a/2)`.
///
/// With `a = W` this is the draft's once-per-RTT rule; shorter reports are pro-rated, so the
/// decrease per RTT stays within W/2.
pub fn avoidance_delta(
    w: f64,
    mss: f64,
    acked: f64,
    gain: f64,
    q: Micros,
    target: Micros,
    increase_allowed: bool,
) -> f64 {
    if w <= 0.0 {
        return 0.0;
    }
    let a = acked.min(w).max(0.0);
    let increase = gain * mss * a / w;
    if q <= target {
        return if increase_allowed { increase } else { 0.0 };
    }
    let over = q.0 as f64 / target.0 as f64 - 1.0;
    (increase - C_DECREASE * over * a).max(-MD_CAP_FRACTION * a)
}

/// One ACK of libutp's `apply_ccontrol` (docs/algorithms/ledbat-pp.md §2.3–§2.4 DEV(libutp); TV-12): GAIN from the
/// connection's minimum RTT, MSS fixed at `libutp_mss`, `a/W` as `min(a,W)/max(a,W)`, the
/// decrease capped at half of that, a change smaller than one byte rounded to ±1 byte, and
/// the result truncated to whole bytes. The caller applies the minimum window.
pub fn libutp_ack_update(
    w: f64,
    bytes_acked: f64,
    our_delay: Micros,
    target: Micros,
    gain: f64,
    libutp_mss: f64,
    increase_allowed: bool,
) -> f64 {
    let hi = w.max(bytes_acked);
    if hi <= 0.0 {
        return w;
    }
    let window_factor = w.min(bytes_acked) / hi;
    let delay_factor = (target.0 as f64 - our_delay.0 as f64) / target.0 as f64;
    let mut increase = gain * libutp_mss * window_factor;
    if !increase_allowed && delay_factor > 0.0 {
        increase = 0.0;
    }
    let delta = (increase + w * delay_factor.min(0.0) * window_factor)
        .max(-MD_CAP_FRACTION * w * window_factor);
    let delta = if delta != 0.0 && delta.abs() < 1.0 {
        delta.signum()
    } else {
        delta
    };
    (w + delta).max(0.0).trunc()
}

/// When the next slowdown starts: `exit + 9·D` (draft §4.4).
pub fn next_slowdown(exit: Micros, duration: Micros) -> Micros {
    exit + Micros(
        duration
            .0
            .saturating_mul(crate::params::SLOWDOWN_INTERVAL_FACTOR),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::TARGET;

    const MSS: f64 = 1500.0;

    fn ms(x: f64) -> Micros {
        Micros((x * 1000.0).round() as u64)
    }

    /// TV-1: the GAIN table with the ordinary ceiling; the "larger than" literal reading would
    /// give 5 at 30 ms, we give 4.
    #[test]
    fn tv1_gain_divisor_table() {
        let table: [(f64, u64); 17] = [
            (1.0, 16),
            (5.0, 16),
            (7.5, 16),
            (8.0, 15),
            (10.0, 12),
            (15.0, 8),
            (20.0, 6),
            (25.0, 5),
            (30.0, 4),
            (40.0, 3),
            (50.0, 3),
            (60.0, 2),
            (100.0, 2),
            (119.0, 2),
            (120.0, 1),
            (150.0, 1),
            (200.0, 1),
        ];
        for (base_ms, f) in table {
            assert_eq!(
                gain_divisor(TARGET, ms(base_ms)),
                Some(f),
                "base {base_ms} ms"
            );
        }
        for (base_us, f) in [
            (7_500, 16),
            (10_000, 12),
            (29_999, 5),
            (30_000, 4),
            (30_001, 4),
            (120_000, 1),
            (120_001, 1),
        ] {
            assert_eq!(
                gain_divisor(TARGET, Micros(base_us)),
                Some(f),
                "{base_us} µs"
            );
        }
        assert_eq!(gain_divisor(TARGET, Micros(0)), None);
    }

    /// TV-4: below, at and just under the target the increase is G·MSS per RTT.
    #[test]
    fn tv4_avoidance_increase() {
        for q in [20.0, 45.0, 60.0] {
            let d = avoidance_delta(150_000.0, MSS, 150_000.0, 0.25, ms(q), TARGET, true);
            assert!((d - 375.0).abs() < 1e-9, "q={q}: {d}");
            let per_ack = avoidance_delta(150_000.0, MSS, 1500.0, 0.25, ms(q), TARGET, true);
            assert!((per_ack - 3.75).abs() < 1e-9);
        }
    }

    /// TV-5: the multiplicative decrease and its W/2 cap.
    #[test]
    fn tv5_multiplicative_decrease() {
        for (q, after) in [
            (61.2, 147_375.0),
            (75.0, 112_875.0),
            (90.0, 75_375.0),
            (120.0, 75_000.0),
            (600.0, 75_000.0),
        ] {
            let w = 150_000.0;
            let got = w + avoidance_delta(w, MSS, w, 0.25, ms(q), TARGET, true);
            assert!((got - after).abs() < 1e-6, "q={q}: {got}");
        }
        let small = 4500.0 + avoidance_delta(4500.0, MSS, 4500.0, 0.25, ms(150.0), TARGET, true);
        assert!(
            (small - 2250.0).abs() < 1e-9,
            "before the 2-MSS floor: {small}"
        );
    }

    /// TV-11: at q* = T·(1 + G/W_pkts) the per-RTT change vanishes.
    #[test]
    fn tv11_equilibrium() {
        let w = 225_000.0;
        let q_star: f64 = 60_000.0 * (1.0 + 0.25 / 150.0);
        assert!((q_star - 60_100.0).abs() < 1e-6);
        let d = avoidance_delta(w, MSS, w, 0.25, Micros(q_star as u64), TARGET, true);
        assert!(d.abs() < 1.0, "{d}");
    }

    #[test]
    fn avoidance_without_use_of_the_window_does_not_grow_but_still_decreases() {
        assert_eq!(
            avoidance_delta(150_000.0, MSS, 150_000.0, 0.25, ms(20.0), TARGET, false),
            0.0
        );
        assert!(avoidance_delta(150_000.0, MSS, 150_000.0, 0.25, ms(90.0), TARGET, false) < 0.0);
    }

    /// TV-6's exit comparison is strict.
    #[test]
    fn slow_start_exit_is_strict() {
        assert!(!slow_start_delay_exit(ms(45.0), TARGET));
        assert!(slow_start_delay_exit(Micros(45_001), TARGET));
        assert!((slow_start_growth(0.25, 3000.0) - 750.0).abs() < 1e-12);
    }

    /// TV-12: libutp's per-ACK update, byte for byte.
    #[test]
    fn tv12_libutp_per_ack() {
        let g = 1.0 / gain_divisor(TARGET, Micros(30_000)).expect("base") as f64;
        for (delay_ms, after) in [(20.0, 150_003.0), (90.0, 149_286.0), (200.0, 149_282.0)] {
            let w = libutp_ack_update(150_000.0, 1435.0, ms(delay_ms), TARGET, g, MSS, true);
            assert_eq!(w, after, "delay {delay_ms}");
        }
        assert_eq!(
            libutp_ack_update(3000.0, 1435.0, ms(20.0), TARGET, g, MSS, true),
            3179.0
        );
        let g16 = 1.0 / gain_divisor(TARGET, Micros(5_000)).expect("base") as f64;
        assert_eq!(
            libutp_ack_update(150_000.0, 1435.0, ms(20.0), TARGET, g16, MSS, true),
            150_001.0
        );
        assert_eq!(
            libutp_ack_update(150_000.0, 1435.0, ms(20.0), TARGET, g, MSS, false),
            150_000.0,
            "no increase when the window was not full"
        );
    }

    #[test]
    fn next_slowdown_is_nine_durations_after_exit() {
        assert_eq!(next_slowdown(Micros(600), Micros(600)), Micros(6_000));
        assert_eq!(
            next_slowdown(Micros(u64::MAX), Micros(u64::MAX)),
            Micros(u64::MAX)
        );
    }
}
