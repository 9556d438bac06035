//! Constants of CUBIC (RFC 9438) and of this implementation, and the per-algorithm [`Config`].

use algs_core::Micros;
use thiserror::Error;

/// Multiplicative decrease factor, RFC 9438 §4.6 (`β_cubic`); Linux `beta` = 717/1024.
pub const BETA_CUBIC: f64 = 0.7;

/// Cubic scaling constant in segments/s³, RFC 9438 §4.2 (`C`); Linux `bic_scale` 41 ≈ 0.4.
pub const C_CUBIC: f64 = 0.4;

/// Largest growth of the target in one RTT, RFC 9438 §4.2: the target is at most
/// `1.5 * cwnd`.
pub const MAX_TARGET_FACTOR: f64 = 1.5;

/// Smallest window ever installed, in segments. RFC 9438 §4.6 floors ssthresh at 2 segments,
/// and a CCP datapath rounds `Cwnd` down to whole packets (docs/datapaths.md §4.3), so anything
/// smaller risks a stalled flow.
pub const MIN_CWND_SEGMENTS: u64 = 2;

/// Window after a retransmission timeout, in segments. RFC 5681 §3.1 (cited by RFC 9438 §4.8)
/// says one; we use two so that a delayed-ACK receiver answers at once and the window never
/// goes below the floor above (see the deviations in the crate documentation).
pub const LOSS_WINDOW_SEGMENTS: u64 = 2;

/// Window when the datapath announces none, in segments (RFC 6928 initial window, as Linux).
pub const DEFAULT_INIT_CWND_SEGMENTS: u64 = 10;

/// MSS assumed when the datapath announces none, bytes (a 1500-byte Ethernet MTU minus
/// IPv4/TCP headers with timestamps, as Linux reports it).
pub const FALLBACK_MSS_BYTES: u64 = 1448;

/// Largest window, bytes: the datapath's `Cwnd` register is a u32 (docs/datapaths.md §4.3).
pub const MAX_CWND_BYTES: u64 = u32::MAX as u64;

/// Smallest report interval, µs: one report per RTT, but never more than one per
/// millisecond per flow (keeps the agent's load bounded on sub-millisecond paths; the
/// growth step scales with the bytes a report acks, so longer intervals lose nothing).
pub const REPORT_FLOOR_US: u64 = 1_000;

/// Gain of the smoothed-RTT average, RFC 6298 §2 (`alpha` = 1/8), applied once per report.
pub const SRTT_GAIN: f64 = 0.125;

/// Slack when deciding whether the window limited the sender, in segments: the largest
/// flight of a report interval is within this of the window (the datapath sends whole
/// packets of a window that need not be a multiple of the MSS).
pub const CWND_LIMITED_SLACK_SEGMENTS: u64 = 2;

/// HyStart (Linux `tcp_cubic`, `hystart_low_window`): no delay-based exit from slow start
/// below this window, in segments.
pub const HYSTART_LOW_WINDOW_SEGMENTS: u64 = 16;

/// HyStart delay threshold bounds, µs (Linux `HYSTART_DELAY_MIN`/`MAX`): slow start ends
/// when a round's smallest RTT exceeds the flow's by `clamp(min_rtt / 8, 4 ms, 16 ms)`.
pub const HYSTART_DELAY_MIN_US: u64 = 4_000;
pub const HYSTART_DELAY_MAX_US: u64 = 16_000;

/// HyStart delay threshold as a fraction of the minimum RTT (Linux `delay_min >> 3`).
pub const HYSTART_DELAY_DIVISOR: u64 = 8;

/// A configuration value outside its meaningful range.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    #[error("beta_cubic must be in (0, 1), got {0}")]
    BetaCubic(f64),
    #[error("C must be positive and finite, got {0}")]
    C(f64),
    #[error("report floor must be between 1 µs and 2^31 µs, got {0} µs")]
    ReportFloor(u64),
}

/// How a CUBIC flow behaves. `Default` is RFC 9438 with Linux's choices where the RFC leaves
/// one open.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `β_cubic`, RFC 9438 §4.6.
    beta_cubic: f64,
    /// `C`, segments/s³, RFC 9438 §4.2.
    c: f64,
    /// Fast convergence, RFC 9438 §4.7 (Linux `fast_convergence` = 1).
    fast_convergence: bool,
    /// The Reno-friendly region, RFC 9438 §4.3 (Linux `tcp_friendliness` = 1).
    reno_friendly: bool,
    /// Raise `α_cubic` to 1 once `W_est` reaches the window before the last reduction
    /// (RFC 9438 §4.3, a SHOULD; Linux keeps `α_cubic` fixed).
    alpha_switch: bool,
    /// Grow only when the window limited the sender, in the datapath's slow start and in
    /// avoidance, and freeze the cubic clock while it did not (RFC 9438 §5.8; Linux
    /// `tcp_is_cwnd_limited`). Needs a datapath that fills `Flow.bytes_in_flight`.
    cwnd_limited_only: bool,
    /// Smallest report interval.
    report_floor: Micros,
    /// Leave slow start early when the RTT rises (Linux HyStart's delay detection; off by
    /// default: RFC 9438 slow start runs until ssthresh or a congestion event).
    hystart: bool,
    /// Answer a scavenger or hybrid request with a hand-off (the flow's state, for the
    /// runtime to start a scavenger algorithm from) instead of accepting it unchanged.
    hand_off_on_scavenger: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            beta_cubic: BETA_CUBIC,
            c: C_CUBIC,
            fast_convergence: true,
            reno_friendly: true,
            alpha_switch: true,
            cwnd_limited_only: true,
            report_floor: Micros(REPORT_FLOOR_US),
            hystart: false,
            hand_off_on_scavenger: false,
        }
    }
}

impl Config {
    /// Linux `tcp_cubic` behaviour where it differs from the RFC's recommendations: `α_cubic`
    /// stays `3(1-β)/(1+β)` in the Reno-friendly region, and HyStart's delay detection ends
    /// slow start.
    pub fn linux() -> Self {
        Config {
            alpha_switch: false,
            hystart: true,
            ..Config::default()
        }
    }

    pub fn with_beta_cubic(mut self, beta_cubic: f64) -> Result<Self, ConfigError> {
        if !(beta_cubic > 0.0 && beta_cubic < 1.0) {
            return Err(ConfigError::BetaCubic(beta_cubic));
        }
        self.beta_cubic = beta_cubic;
        Ok(self)
    }

    pub fn with_c(mut self, c: f64) -> Result<Self, ConfigError> {
        if !(c.is_finite() && c > 0.0) {
            return Err(ConfigError::C(c));
        }
        self.c = c;
        Ok(self)
    }

    pub fn with_fast_convergence(mut self, on: bool) -> Self {
        self.fast_convergence = on;
        self
    }

    pub fn with_reno_friendly(mut self, on: bool) -> Self {
        self.reno_friendly = on;
        self
    }

    pub fn with_alpha_switch(mut self, on: bool) -> Self {
        self.alpha_switch = on;
        self
    }

    pub fn with_cwnd_limited_only(mut self, on: bool) -> Self {
        self.cwnd_limited_only = on;
        self
    }

    pub fn with_report_floor(mut self, floor: Micros) -> Result<Self, ConfigError> {
        // The floor is an immediate in the datapath program: below 2^31 (docs/datapaths.md §4.5).
        if floor.0 == 0 || floor.0 >= 1 << 31 {
            return Err(ConfigError::ReportFloor(floor.0));
        }
        self.report_floor = floor;
        Ok(self)
    }

    pub fn with_hystart(mut self, on: bool) -> Self {
        self.hystart = on;
        self
    }

    pub fn with_hand_off_on_scavenger(mut self, on: bool) -> Self {
        self.hand_off_on_scavenger = on;
        self
    }

    pub fn beta_cubic(&self) -> f64 {
        self.beta_cubic
    }

    pub fn c(&self) -> f64 {
        self.c
    }

    pub fn fast_convergence(&self) -> bool {
        self.fast_convergence
    }

    pub fn reno_friendly(&self) -> bool {
        self.reno_friendly
    }

    pub fn alpha_switch(&self) -> bool {
        self.alpha_switch
    }

    pub fn cwnd_limited_only(&self) -> bool {
        self.cwnd_limited_only
    }

    pub fn report_floor(&self) -> Micros {
        self.report_floor
    }

    pub fn hystart(&self) -> bool {
        self.hystart
    }

    pub fn hand_off_on_scavenger(&self) -> bool {
        self.hand_off_on_scavenger
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_values_are_refused() {
        assert_eq!(
            Config::default().with_beta_cubic(1.0),
            Err(ConfigError::BetaCubic(1.0))
        );
        assert!(Config::default().with_beta_cubic(f64::NAN).is_err());
        assert!(Config::default().with_c(0.0).is_err());
        assert!(Config::default().with_c(f64::INFINITY).is_err());
        assert!(Config::default().with_report_floor(Micros(0)).is_err());
        assert!(
            Config::default()
                .with_report_floor(Micros(1 << 31))
                .is_err()
        );
        let ok = Config::default()
            .with_beta_cubic(0.8)
            .and_then(|c| c.with_c(0.5));
        assert_eq!(ok.map(|c| (c.beta_cubic(), c.c())), Ok((0.8, 0.5)));
    }
}
