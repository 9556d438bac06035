//! Constants of Proteus and the per-flow configuration. Every value cites
//! docs/algorithms/proteus.md; `Config::default()` is the UDT-evaluated setting.

use algs_core::BytesPerSec;

/// Rate exponent t of the utility (§0, §1.2): x^0.9 with x in Mbit/s (10^6).
pub const RATE_EXPONENT: f64 = 0.9;
/// RTT-gradient coefficient b (§0, §1.2); the gradient is dimensionless (s/s).
pub const LATENCY_COEFFICIENT: f64 = 900.0;
/// Loss coefficient c (§0, §1.2); loss is a fraction of the MI's packets.
pub const LOSS_COEFFICIENT: f64 = 11.35;
/// RTT-deviation coefficient d per µs of σ (§0, §1.3: 1500/s in the paper's units).
pub const RTT_DEVIATION_COEFFICIENT_PER_US: f64 = 0.0015;

/// Probing step ε: probes run at r·(1 ± ε) (§0, §2.4).
pub const PROBING_STEP: f64 = 0.05;
/// Probing pairs under the primary rule (Proteus-P, Hybrid below h; §2.4).
pub const PRIMARY_PROBING_PAIRS: usize = 3;
/// Probing pairs under the scavenger rule (Proteus-S, Hybrid above h; §2.4).
pub const SCAVENGER_PROBING_PAIRS: usize = 2;

/// 2^20: UDT's "Megabit" in γ and in the step size (§2.6). Δ[bit/s] = 2^40·ΔU/Δr[bit/s].
pub const UDT_MEGABIT: f64 = 1_048_576.0;
/// θ0, gradient-to-rate factor in 2^20-bit/s units (§0, §2.6).
pub const GRADIENT_TO_RATE_FACTOR: f64 = 1.0;
/// Exponent of the confidence amplifier m = ⌊(τ+1)/2⌋^1.2 (§0, §2.6).
pub const AMPLIFIER_EXPONENT: f64 = 1.2;
/// Initial dynamic change boundary ω0 (§0, §2.6).
pub const INITIAL_MAX_STEP: f64 = 0.05;
/// Boundary increment per consecutive capped step (§0, §2.6).
pub const INCREMENTAL_STEP: f64 = 0.05;
/// Minimum rate change, applied after the boundary (§0, §2.6), bit/s.
pub const MIN_RATE_CHANGE_BPS: f64 = 500_000.0;
/// Minimum sending rate (§0, §2.4), bit/s.
pub const MIN_RATE_BPS: f64 = 500_000.0;

/// Largest rate: the datapath's `Rate` register is a u32 of bytes/s (docs/datapaths.md §4.3),
/// bit/s. Not in UDT; without it STARTING on an unbounded path would double forever.
pub const MAX_RATE_BPS: f64 = u32::MAX as f64 * 8.0;

/// Initial rate: 10 packets of 1400 B per 100 ms = 1.12 Mbit/s (§2.3), bit/s.
pub const INITIAL_RATE_BPS: f64 = 1_120_000.0;
/// The initial rate is scaled by this over the first RTT when that RTT is shorter (§2.3), µs.
pub const INITIAL_RATE_RTT_US: f64 = 100_000.0;

/// Bits of the 1500-byte packet that UDT adds to an MI's duration and uses as the
/// regression's time unit τ = ⌊12000 / R[Mbit/s]⌋ µs (§1.1, §1.5).
pub const PACKET_BITS: f64 = 12_000.0;
/// STARTING MIs ignore gradients below this over the MI duration in µs (§1.6d).
pub const STARTING_GRADIENT_TOLERANCE_US: f64 = 1_000.0;
/// Not in UDT: how many binomial standard errors of a loss rate are sampling noise. A
/// STARTING MI's loss counts only beyond them (§1.6d): under random loss an MI of a few
/// dozen packets that loses one or two ended STARTING at a fraction of the link (Proteus-P
/// at 5 % loss left it at 7 Mbit/s of 50 and took 30 s to climb back). Two compared MIs
/// whose loss rates differ within them are scored with the pooled rate (§2.5).
pub const LOSS_NOISE_GAIN: f64 = 2.0;

/// MIs of history for the trending gradient and the deviation baseline (§0, §1.6b).
pub const RTT_HISTORY_LEN: usize = 6;
/// EWMA weight α of the trending and deviation filters (§0, §1.6).
pub const FILTER_ALPHA: f64 = 0.1;
/// Band of the trending gradient, in deviations (§0, §1.6b).
pub const TRENDING_BAND_GAIN: f64 = 2.0;
/// Not in UDT: how many of its own standard errors a measured RTT trend must exceed to
/// count (§1.6b, §1.6d). UDT's trending band (b) is learned from tg's successive
/// differences only, and its STARTING rule (d) forgives a fixed 1 ms over the MI; where
/// whole-millisecond delivery makes σ ≈ 0.5 ms, a third of a lone flow's MIs were trending
/// outliers and an MI of a few samples could end STARTING at a fraction of the link.
pub const TREND_NOISE_GAIN: f64 = 3.0;
/// Not in UDT: a window whose mean RTT is this far above the flow's minimum (µs, or this
/// fraction of the minimum if larger) stands over a primary's queue, and the noise floor of
/// [`TREND_NOISE_GAIN`] is off there. Proteus-S flows alone or among their own keep a median
/// of about 1 ms at 30 ms, 90 % of their MIs below 2.3–4.5 ms.
pub const STANDING_QUEUE_FLOOR_US: f64 = 2_000.0;
pub const STANDING_QUEUE_FRACTION: f64 = 0.1;
/// Not in UDT: an MI that lost more than this fraction of its packets marks a loss-based
/// primary, and the noise floor of [`TREND_NOISE_GAIN`] is off for [`LOSS_MEMORY_US`] of
/// flow time after it, about one CUBIC epoch at 200 Mbit/s and 30 ms (8 s).
pub const HEAVY_LOSS: f64 = 0.01;
pub const LOSS_MEMORY_US: f64 = 10_000_000.0;
/// Not in UDT: a heavy loss is the flow's own, and not remembered, when one of the
/// [`OWN_LOSS_LOOKBACK`] MIs before it sent at least as fast and either lost heavily itself
/// by the same rule or saw its RTT rise significantly, without heavy loss, no faster than
/// this many times its step up over the MI before it (a flow that was not queueing at rate
/// x₀ adds at most x/x₀ − 1 of queue per unit of time at rate x; a primary's slow start or
/// a standing primary's growth at the flow's steady rate is not explained so). A lone
/// Proteus-S at 0.2 BDP overflows the buffer after its own probes over the link 10–17 times
/// a run, and read each as a primary's.
pub const OWN_RISE_GAIN: f64 = 2.0;
pub const OWN_LOSS_LOOKBACK: usize = 2;
/// Not in UDT: a queue that stood (one MI's mean RTT over the standing-queue line) in at
/// least this share of a scavenger's recent MIs, weighted by [`LASTING_QUEUE_GAIN`] per base
/// RTT that an MI's mean RTT spans (about a second at 30 ms), is a primary's. Measured on the
/// eBPF datapath at 50 Mbit/s, 30 ms: beside CUBIC or BBR at 0.4 and 2 BDP 76–97 % of a
/// Proteus-S flow's MIs stood over a queue, alone or among equal Proteus-S flows 0–11 %,
/// never long enough to reach 0.6.
pub const LASTING_QUEUE_SHARE: f64 = 0.6;
pub const LASTING_QUEUE_GAIN: f64 = 1.0 / 32.0;
/// Reset the trending baseline when |tg| < min_tg / β (§0, §1.6b).
pub const TRENDING_RESET_RATIO: f64 = 100.0;
/// A deviation is an outlier above avg + 4·dev (§0, §1.6c).
pub const DEVIATION_OUTLIER_GAIN: f64 = 4.0;
/// … and only above 1 ms (§0, §1.6c), µs.
pub const DEVIATION_OUTLIER_FLOOR_US: f64 = 1_000.0;
/// The deviation baseline is re-learned once the outlier counter exceeds this (§1.6c).
pub const DEVIATION_RESET_RATIO: f64 = 0.95;
/// "Unset" threshold of the filters' baselines (§1.6b, §1.6c).
pub const FILTER_EPSILON: f64 = 1e-6;

/// An MI that sent less than this share of its target rate is rate-limited by something
/// other than its schedule (application or window; §3.6); its measured rate is used.
pub const RATE_LIMITED_RATIO: f64 = 0.9;
/// Cwnd = this × rate × smoothed RTT, so the window never limits a paced sender (§2.2 REC).
pub const CWND_RATE_RTT_GAIN: f64 = 2.0;
/// Smallest Cwnd, in segments (MSS; §2.2 REC; 10 was suggested, but we keep the window as a
/// safety net only and let pacing do the work).
pub const MIN_CWND_SEGMENTS: u64 = 4;
/// Gain of the smoothed RTT kept for the window (1/8, as TCP's SRTT).
pub const SRTT_GAIN: f64 = 0.125;

/// How the gradient's significance error is computed (§1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GradientError {
    /// UDT's evaluated formula (reference line τ times flatter; ≈ σ/r̄). Default (§1.5 REC).
    #[default]
    Udt,
    /// The textbook least-squares residual.
    LeastSquares,
}

/// Per-flow configuration. `Default` is UDT's setting (docs/algorithms/proteus.md §0).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    gradient_error: GradientError,
    hybrid_threshold: Option<BytesPerSec>,
    rng_seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            gradient_error: GradientError::Udt,
            hybrid_threshold: None,
            rng_seed: 0x5EED_0F9E_07E0_5EED,
        }
    }
}

impl Config {
    /// Selects the gradient error formula (§1.5).
    pub fn with_gradient_error(mut self, e: GradientError) -> Self {
        self.gradient_error = e;
        self
    }

    /// Threshold h of Proteus-H when neither the policy nor the application gives one.
    pub fn with_hybrid_threshold(mut self, h: Option<BytesPerSec>) -> Self {
        self.hybrid_threshold = h;
        self
    }

    /// Seed of the probing-order generator (mixed with the flow's sid).
    pub fn with_rng_seed(mut self, seed: u64) -> Self {
        self.rng_seed = seed;
        self
    }

    pub fn gradient_error(&self) -> GradientError {
        self.gradient_error
    }

    pub fn hybrid_threshold(&self) -> Option<BytesPerSec> {
        self.hybrid_threshold
    }

    pub fn rng_seed(&self) -> u64 {
        self.rng_seed
    }
}
