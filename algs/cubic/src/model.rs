//! The equations of RFC 9438, one function each, in the RFC's units: windows in segments
//! (f64), time in seconds (f64). No state, no clock.

/// `α_cubic = 3(1 - β_cubic) / (1 + β_cubic)`, RFC 9438 §4.3: the additive increase (segments
/// per RTT) that gives the same average window as Reno (α = 1, β = 0.5) under the same loss
/// rate.
pub fn alpha_cubic(beta_cubic: f64) -> f64 {
    3.0 * (1.0 - beta_cubic) / (1.0 + beta_cubic)
}

/// `K = ∛((W_max - cwnd_epoch) / C)`, RFC 9438 §4.2 (Figure 2): seconds until the curve that
/// starts at `cwnd_epoch` reaches its plateau `W_max`. A start at or above `W_max` gives
/// `K = 0` (RFC 9438 §4.8 and Linux: the curve starts convex from the current window).
pub fn k(w_max: f64, cwnd_epoch: f64, c: f64) -> f64 {
    let gap = w_max - cwnd_epoch;
    if gap > 0.0 && c > 0.0 {
        (gap / c).cbrt()
    } else {
        0.0
    }
}

/// `W_cubic(t) = C (t - K)³ + W_max`, RFC 9438 §4.2 (Figure 1), segments; `t` is seconds since
/// the start of the congestion-avoidance stage.
pub fn w_cubic(t: f64, k: f64, w_max: f64, c: f64) -> f64 {
    let d = t - k;
    c * d * d * d + w_max
}

/// The window cwnd moves toward over the next RTT, RFC 9438 §4.2: `W_cubic(t + RTT)`, no lower
/// than `cwnd` (the concave region never shrinks the window) and no higher than
/// `1.5 * cwnd`.
pub fn target(w_cubic_next: f64, cwnd: f64, max_factor: f64) -> f64 {
    if w_cubic_next.is_nan() {
        return cwnd;
    }
    w_cubic_next.clamp(cwnd, cwnd * max_factor)
}

/// `W_est` after `acked` segments were acknowledged with window `cwnd`, RFC 9438 §4.3:
/// `W_est += α_cubic * acked / cwnd`.
pub fn w_est(w_est: f64, alpha: f64, acked: f64, cwnd: f64) -> f64 {
    if cwnd > 0.0 {
        w_est + alpha * acked / cwnd
    } else {
        w_est
    }
}

/// `W_max` remembered at a congestion event, RFC 9438 §4.7: with fast convergence, a window
/// below the previous `W_max` means a new flow is competing, and the plateau is lowered to
/// `cwnd (1 + β_cubic) / 2` to release bandwidth.
pub fn w_max_after_event(
    cwnd: f64,
    previous_w_max: Option<f64>,
    beta_cubic: f64,
    fast_convergence: bool,
) -> f64 {
    match previous_w_max {
        Some(prev) if fast_convergence && cwnd < prev => cwnd * (1.0 + beta_cubic) / 2.0,
        _ => cwnd,
    }
}

/// `ssthresh = max(cwnd * β_cubic, 2)` at a congestion event, RFC 9438 §4.6, segments.
pub fn ssthresh_after_event(cwnd: f64, beta_cubic: f64, floor: f64) -> f64 {
    (cwnd * beta_cubic).max(floor)
}

/// The RTT increase that ends slow start under HyStart's delay detection (Linux
/// `HYSTART_DELAY_THRESH`): `min_rtt / 8`, clamped to [4 ms, 16 ms]. Microseconds.
pub fn hystart_delay_threshold_us(min_rtt_us: u64) -> u64 {
    use crate::params::{HYSTART_DELAY_DIVISOR, HYSTART_DELAY_MAX_US, HYSTART_DELAY_MIN_US};
    (min_rtt_us / HYSTART_DELAY_DIVISOR).clamp(HYSTART_DELAY_MIN_US, HYSTART_DELAY_MAX_US)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{BETA_CUBIC, C_CUBIC, MAX_TARGET_FACTOR};

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn alpha_cubic_is_reno_friendly_value() {
        // 3 * 0.3 / 1.7 = 0.529411...
        assert!(close(alpha_cubic(BETA_CUBIC), 0.529_411_764_7, 1e-9));
        // Reno's own parameters give Reno's increase.
        assert!(close(alpha_cubic(0.5), 1.0, 1e-12));
    }

    #[test]
    fn k_matches_hand_computed_values() {
        // W_max = 100, cut to 70: K = ∛(30 / 0.4) = ∛75 = 4.217163...
        assert!(close(k(100.0, 70.0, C_CUBIC), 4.217_163_326_5, 1e-9));
        // W_max = 1000, cut to 700: K = ∛750 = 9.085603...
        assert!(close(k(1000.0, 700.0, C_CUBIC), 9.085_602_964_2, 1e-9));
        // Starting at the plateau or above it: no concave part.
        assert_eq!(k(100.0, 100.0, C_CUBIC), 0.0);
        assert_eq!(k(100.0, 120.0, C_CUBIC), 0.0);
    }

    #[test]
    fn w_cubic_passes_through_start_plateau_and_mirror() {
        let (w_max, start) = (100.0, 70.0);
        let kk = k(w_max, start, C_CUBIC);
        assert!(close(w_cubic(0.0, kk, w_max, C_CUBIC), start, 1e-9));
        assert!(close(w_cubic(kk, kk, w_max, C_CUBIC), w_max, 1e-12));
        // Point symmetry about (K, W_max): 2K gives W_max + 30.
        assert!(close(w_cubic(2.0 * kk, kk, w_max, C_CUBIC), 130.0, 1e-9));
        // One second in: 0.4 * (1 - 4.2171633)^3 + 100 = 86.68076...
        assert!(close(w_cubic(1.0, kk, w_max, C_CUBIC), 86.680_76, 1e-4));
    }

    #[test]
    fn target_is_clamped_between_cwnd_and_one_and_a_half_cwnd() {
        assert_eq!(target(90.0, 100.0, MAX_TARGET_FACTOR), 100.0);
        assert_eq!(target(120.0, 100.0, MAX_TARGET_FACTOR), 120.0);
        assert_eq!(target(400.0, 100.0, MAX_TARGET_FACTOR), 150.0);
        assert_eq!(target(f64::NAN, 100.0, MAX_TARGET_FACTOR), 100.0);
    }

    #[test]
    fn w_est_grows_alpha_per_window_acked() {
        let alpha = alpha_cubic(BETA_CUBIC);
        // One full window of 70 segments acked: + α.
        assert!(close(w_est(70.0, alpha, 70.0, 70.0), 70.0 + alpha, 1e-12));
        // Half a window: + α/2.
        assert!(close(
            w_est(70.0, alpha, 35.0, 70.0),
            70.0 + alpha / 2.0,
            1e-12
        ));
        assert_eq!(w_est(70.0, alpha, 35.0, 0.0), 70.0);
    }

    #[test]
    fn fast_convergence_lowers_w_max_only_below_previous() {
        // 80 < 100: 80 * 1.7 / 2 = 68.
        assert!(close(
            w_max_after_event(80.0, Some(100.0), BETA_CUBIC, true),
            68.0,
            1e-12
        ));
        assert_eq!(
            w_max_after_event(80.0, Some(100.0), BETA_CUBIC, false),
            80.0
        );
        assert_eq!(
            w_max_after_event(120.0, Some(100.0), BETA_CUBIC, true),
            120.0
        );
        assert_eq!(w_max_after_event(80.0, None, BETA_CUBIC, true), 80.0);
    }

    #[test]
    fn hystart_threshold_is_an_eighth_of_min_rtt_within_4_and_16_ms() {
        assert_eq!(hystart_delay_threshold_us(10_000), 4_000);
        assert_eq!(hystart_delay_threshold_us(80_000), 10_000);
        assert_eq!(hystart_delay_threshold_us(200_000), 16_000);
    }

    #[test]
    fn ssthresh_is_seven_tenths_with_floor_two() {
        assert!(close(
            ssthresh_after_event(100.0, BETA_CUBIC, 2.0),
            70.0,
            1e-12
        ));
        assert_eq!(ssthresh_after_event(2.0, BETA_CUBIC, 2.0), 2.0);
    }
}
