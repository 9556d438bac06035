//! Constants of LEDBAT++ (docs/algorithms/ledbat-pp.md §0) and the per-flow configuration.

use algs_core::Micros;

/// Target queueing delay T (draft §4.5; docs/algorithms/ledbat-pp.md §0). RFC 6817 used 100 ms.
pub const TARGET: Micros = Micros(60_000);

/// Largest GAIN divisor F (draft §4.2, "MAY experiment"): growth never slower than
/// 1/16 MSS per RTT.
pub const F_MAX: u64 = 16;

/// Multiplicative-decrease constant C (draft §4.3, "RECOMMENDED 1").
pub const C_DECREASE: f64 = 1.0;

/// Largest decrease in one RTT, as a fraction of W (draft §4.3; the cap is required).
pub const MD_CAP_FRACTION: f64 = 0.5;

/// Minimum and initial window, in segments (MSS; draft §4.1 and §4.3, MUST).
pub const MIN_CWND_SEGMENTS: f64 = 2.0;

/// The initial slow start ends once q exceeds this fraction of T (draft §4.1).
pub const SLOW_START_EXIT_FRACTION: f64 = 0.75;

/// Slowdown freeze length and the delay of the first slowdown, in RTTs (draft §4.4).
pub const SLOWDOWN_FREEZE_RTTS: u64 = 2;

/// The next slowdown starts this many slowdown durations after the last one ended
/// (draft §4.4; period 10·D, at most ~10 % of the time slowed down).
pub const SLOWDOWN_INTERVAL_FACTOR: u64 = 9;

/// Base-delay history: number of one-minute buckets (RFC 6817 BASE_HISTORY; docs/algorithms/ledbat-pp.md §1.2).
pub const BASE_HISTORY: usize = 10;

/// Length of one base-history bucket (RFC 6817; docs/algorithms/ledbat-pp.md §1.2).
pub const BASE_BUCKET: Micros = Micros(60_000_000);

/// Samples in the current-delay filter (draft §4.5; docs/algorithms/ledbat-pp.md §1.3). The datapath program keeps
/// them; the controller picks the report field that matches.
pub const CUR_DELAY_SAMPLES: usize = 4;

/// Weight of a new sample in the smoothed RTT used for timers (docs/algorithms/ledbat-pp.md §5.3, RFC 6298's 1/8).
pub const SRTT_GAIN: f64 = 1.0 / 8.0;

/// Longest a loss event lasts, in smoothed RTTs, when the datapath's acked and lost counts
/// never resolve the flight at the cut (REC; docs/algorithms/ledbat-pp.md §2.5 leaves "once per RTT" to us).
pub const RECOVERY_MAX_RTTS: u64 = 4;

/// RTT used for timers before any RTT sample arrived (RFC 6298 §2.1's initial RTO; docs/algorithms/ledbat-pp.md §3.2
/// leaves the case open, REC).
pub const FALLBACK_RTT: Micros = Micros(1_000_000);

/// A window counts as used when the largest flight of an interval is within this many MSS of
/// it (REC, docs/algorithms/ledbat-pp.md §2.3: RFC 6817's ALLOWED_INCREASE = 1 plus up to 2 MSS that a delayed ACK
/// removes from flight before the datapath samples it).
pub const CWND_LIMITED_SLACK_SEGMENTS: f64 = 3.0;

// ---- libutp-compat profile (docs/algorithms/ledbat-pp.md §4.2 "Differences from the draft"); DEV(libutp) ----

/// libutp's current-delay filter length (docs/algorithms/ledbat-pp.md §1.3, DEV(libutp)).
pub const LIBUTP_CUR_DELAY_SAMPLES: usize = 3;
/// libutp's base-history length in one-minute buckets (docs/algorithms/ledbat-pp.md §0, DEV(libutp)).
pub const LIBUTP_BASE_HISTORY: usize = 13;
/// libutp's minimum window in bytes (docs/algorithms/ledbat-pp.md §0, DEV(libutp)).
pub const LIBUTP_MIN_CWND_BYTES: f64 = 3000.0;
/// The MSS libutp's increase uses whatever the packet size (docs/algorithms/ledbat-pp.md §2.3, DEV(libutp)).
pub const LIBUTP_MSS_BYTES: f64 = 1500.0;
/// libutp halves at most once per this interval (`MAX_WINDOW_DECAY`; docs/algorithms/ledbat-pp.md §2.5).
pub const LIBUTP_LOSS_HOLDOFF: Micros = Micros(100_000);
/// libutp increases only if the window was full within this interval (docs/algorithms/ledbat-pp.md §2.3).
pub const LIBUTP_WINDOW_FULL_WITHIN: Micros = Micros(1_000_000);

/// Which implementation's behaviour a flow reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Profile {
    /// draft-irtf-iccrg-ledbat-plus-plus-01 with the REC choices of
    /// docs/algorithms/ledbat-pp.md §1–§3.
    #[default]
    Draft,
    /// The libutp fork measured in the ANRW'21 paper (docs/algorithms/ledbat-pp.md §4.2): 3-sample filter, 13
    /// buckets, GAIN from the lifetime minimum RTT, doubling slow start and ramp,
    /// `9 × ramp` scheduling, `2·minRTT` timers, per-ACK updates with libutp's rounding,
    /// reschedule on loss, 100 ms loss hold-off, 3000 B minimum. Its one-way delay cannot be
    /// reproduced by a TCP sender: RTT is used.
    LibutpCompat,
}

/// Which RTT measures "2 RTT" for the freeze and the first slowdown (docs/algorithms/ledbat-pp.md §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RttForTimers {
    /// Smoothed RTT when the timer is set (REC; XNU, the Linux module).
    #[default]
    Srtt,
    /// Lifetime minimum RTT (libutp).
    MinRtt,
}

/// Which window a hand-off to a primary carries when it happens during a slowdown (docs/algorithms/ledbat-pp.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HandOffWindow {
    /// `max(W, saved ssthresh)`: the 2-packet slowdown window is a probe, not a verdict (REC).
    #[default]
    RestoreSaved,
    /// The literal current W (the paper's strict reading).
    Strict,
}

/// What a request for hybrid priority does (LEDBAT++ has no hybrid mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HybridPolicy {
    /// Keep scavenging: a hybrid flow above its threshold must yield, and LEDBAT++ never
    /// takes more than a primary would; the guarantee below the threshold is not given.
    #[default]
    StayScavenger,
    /// Hand the flow to the primary, which gives the guarantee but does not yield above it.
    HandOff,
}

/// Per-flow configuration; `Default` is the draft with the REC choices of
/// docs/algorithms/ledbat-pp.md.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    target: Micros,
    profile: Profile,
    rtt_for_timers: RttForTimers,
    hand_off_window: HandOffWindow,
    hybrid: HybridPolicy,
    cwnd_limited_check: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            target: TARGET,
            profile: Profile::Draft,
            rtt_for_timers: RttForTimers::Srtt,
            hand_off_window: HandOffWindow::RestoreSaved,
            hybrid: HybridPolicy::StayScavenger,
            cwnd_limited_check: true,
        }
    }
}

impl Config {
    /// The libutp-compat profile with its timers (2·minRTT).
    pub fn libutp_compat() -> Self {
        Config {
            profile: Profile::LibutpCompat,
            rtt_for_timers: RttForTimers::MinRtt,
            ..Config::default()
        }
    }

    /// Target queueing delay; a zero target is raised to 1 µs so that q/T stays finite.
    pub fn with_target(mut self, target: Micros) -> Self {
        self.target = Micros(target.0.max(1));
        self
    }

    /// Only the profile; [`Config::libutp_compat`] also sets libutp's timer RTT.
    pub fn with_profile(mut self, profile: Profile) -> Self {
        self.profile = profile;
        self
    }

    pub fn with_rtt_for_timers(mut self, rtt: RttForTimers) -> Self {
        self.rtt_for_timers = rtt;
        self
    }

    pub fn with_hand_off_window(mut self, w: HandOffWindow) -> Self {
        self.hand_off_window = w;
        self
    }

    pub fn with_hybrid(mut self, hybrid: HybridPolicy) -> Self {
        self.hybrid = hybrid;
        self
    }

    /// Whether growth waits for the window to be used (REC, docs/algorithms/ledbat-pp.md §2.3). Turn it off only for
    /// a datapath that does not report `Flow.bytes_in_flight`.
    pub fn with_cwnd_limited_check(mut self, on: bool) -> Self {
        self.cwnd_limited_check = on;
        self
    }

    pub fn target(&self) -> Micros {
        self.target
    }

    pub fn profile(&self) -> Profile {
        self.profile
    }

    pub fn rtt_for_timers(&self) -> RttForTimers {
        self.rtt_for_timers
    }

    pub fn hand_off_window(&self) -> HandOffWindow {
        self.hand_off_window
    }

    pub fn hybrid(&self) -> HybridPolicy {
        self.hybrid
    }

    pub fn cwnd_limited_check(&self) -> bool {
        self.cwnd_limited_check
    }

    pub(crate) fn is_libutp(&self) -> bool {
        self.profile == Profile::LibutpCompat
    }

    /// Current-delay filter length of the profile.
    pub(crate) fn cur_delay_samples(&self) -> usize {
        if self.is_libutp() {
            LIBUTP_CUR_DELAY_SAMPLES
        } else {
            CUR_DELAY_SAMPLES
        }
    }

    /// Base-history length of the profile.
    pub(crate) fn base_history(&self) -> usize {
        if self.is_libutp() {
            LIBUTP_BASE_HISTORY
        } else {
            BASE_HISTORY
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_spec_values() {
        let c = Config::default();
        assert_eq!(c.target(), Micros(60_000));
        assert_eq!(c.profile(), Profile::Draft);
        assert_eq!(c.cur_delay_samples(), 4);
        assert_eq!(c.base_history(), 10);
        assert_eq!(c.hand_off_window(), HandOffWindow::RestoreSaved);
    }

    #[test]
    fn libutp_profile_changes_filters_and_timers() {
        let c = Config::libutp_compat();
        assert_eq!(c.cur_delay_samples(), 3);
        assert_eq!(c.base_history(), 13);
        assert_eq!(c.rtt_for_timers(), RttForTimers::MinRtt);
        assert_eq!(Config::default().with_target(Micros(0)).target(), Micros(1));
    }
}
