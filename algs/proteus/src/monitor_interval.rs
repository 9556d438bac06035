//! One monitor interval (MI): the datapath's report, the RTT statistics from its running
//! sums (docs/algorithms/proteus.md §1.5, §3.2) and the utility inputs (§1.1).
//!
//! The datapath accumulates, per MI, n and the sums Σs, Σr, Σs², Σs·r, Σr² of the RTT r and
//! the send-time regressor s (both µs; docs/algorithms/proteus.md §3.4). The centred moments are formed
//! exactly in i128 and only then turned into f64 (§3.2).

use crate::params::{GradientError, PACKET_BITS, RATE_LIMITED_RATIO};
use algs_core::Micros;
use algs_core::units::{BITS_PER_BYTE, BITS_PER_SEC_PER_MBPS};
use thiserror::Error;

/// Packets of slack in the rate-limited test: the datapath counts whole packets between
/// two ACKs, so a short MI can look one or two packets short of its target.
const RATE_LIMITED_SLACK_PACKETS: u64 = 2;

/// The running sums of one MI, as the datapath reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MiSums {
    /// Number of RTT samples.
    pub n: u64,
    /// Σs, µs.
    pub sum_s: u64,
    /// Σr, µs.
    pub sum_r: u64,
    /// Σs², µs².
    pub sum_ss: u64,
    /// Σs·r, µs².
    pub sum_sr: u64,
    /// Σr², µs².
    pub sum_rr: u64,
}

/// The exact centred moments C_xy = n·Σxy − Σx·Σy (§3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moments {
    pub c_ss: i128,
    pub c_sr: i128,
    pub c_rr: i128,
}

impl MiSums {
    pub fn moments(&self) -> Moments {
        let n = i128::from(self.n);
        let (s, r) = (i128::from(self.sum_s), i128::from(self.sum_r));
        // n ≤ 2^17 and each sum < 2^64, so every product is below 2^81 (and Σs·Σr < 2^82).
        Moments {
            c_ss: n * i128::from(self.sum_ss) - s * s,
            c_sr: n * i128::from(self.sum_sr) - s * r,
            c_rr: n * i128::from(self.sum_rr) - r * r,
        }
    }
}

/// RTT statistics of one MI (§1.5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RttStats {
    /// Samples.
    pub n: u64,
    /// Mean RTT r̄, µs.
    pub mean_us: f64,
    /// Population standard deviation σ, µs.
    pub dev_us: f64,
    /// Least-squares gradient g = dRTT/d(send time), dimensionless.
    pub gradient: f64,
    /// UDT's gradient error e_UDT (§1.5), dimensionless.
    pub error_udt: f64,
    /// Least-squares residual error e_LS (§1.5), dimensionless.
    pub error_ls: f64,
    /// Standard error of `gradient` from the regression's residuals, dimensionless
    /// (infinite with two samples, which any line fits).
    pub gradient_se: f64,
}

impl RttStats {
    /// `None` when the sums cannot give a regression (n < 2, all samples at one send time,
    /// or a zero mean RTT).
    pub fn from_sums(sums: &MiSums, pacing_gap_us: f64) -> Option<Self> {
        if sums.n < 2 || sums.sum_r == 0 {
            return None;
        }
        let m = sums.moments();
        if m.c_ss <= 0 {
            return None;
        }
        let n = sums.n as f64;
        let mean_us = sums.sum_r as f64 / n;
        let (c_ss, c_sr, c_rr) = (m.c_ss as f64, m.c_sr as f64, m.c_rr.max(0) as f64);
        let gradient = c_sr / c_ss;
        let norm = n * mean_us;
        // UDT multiplies the packet index by the already-divided slope: in send-time form
        // the reference line's slope is κ = g/τ (§1.5). Kept because it is what the paper
        // evaluated (e ≈ σ/r̄), the textbook residual is `error_ls`.
        let kappa = gradient / pacing_gap_us.max(1.0);
        let error_udt = (c_rr - 2.0 * kappa * c_sr + kappa * kappa * c_ss)
            .max(0.0)
            .sqrt()
            / norm;
        // C_sr² would need 160 bits: square in f64 after centring (§3.5).
        let residual = (c_rr - c_sr * c_sr / c_ss).max(0.0);
        let error_ls = residual.sqrt() / norm;
        // Var(slope) = residual variance / Σ(s − s̄)² = residual / ((n − 2)·C_ss).
        let gradient_se = if sums.n > 2 {
            (residual / ((n - 2.0) * c_ss)).sqrt()
        } else {
            f64::INFINITY
        };
        Some(RttStats {
            n: sums.n,
            mean_us,
            dev_us: c_rr.sqrt() / n,
            gradient,
            error_udt,
            error_ls,
            gradient_se,
        })
    }

    pub fn error(&self, kind: GradientError) -> f64 {
        match kind {
            GradientError::Udt => self.error_udt,
            GradientError::LeastSquares => self.error_ls,
        }
    }
}

/// τ = ⌊12000 / R[Mbit/s]⌋ µs, the pacing gap of a 1500-byte packet at the target rate,
/// at least 1 µs (UDT divides by it; §1.5, §3.2).
pub fn pacing_gap_us(target_bps: f64) -> f64 {
    let mbps = target_bps / BITS_PER_SEC_PER_MBPS;
    if mbps > 0.0 {
        (PACKET_BITS / mbps).floor().max(1.0)
    } else {
        1.0
    }
}

/// D = send span + τ, µs (§1.1).
pub fn mi_duration_us(send_span: Micros, target_bps: f64) -> f64 {
    send_span.0 as f64 + pacing_gap_us(target_bps)
}

/// x = 8·bytes / D, Mbit/s (§1.1).
pub fn measured_rate_mbps(bytes_sent: u64, duration_us: f64) -> f64 {
    if duration_us > 0.0 {
        BITS_PER_BYTE * bytes_sent as f64 / duration_us
    } else {
        0.0
    }
}

/// What a report stands for (`Report.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReportKind {
    /// It closes an MI.
    #[default]
    Complete,
    /// The overflow guard cut the MI's window; the MI continues in the next report.
    Truncated,
    /// The schedule ended long ago and no new one arrived (no MI data).
    Idle,
}

/// One MI report as the datapath program sends it (docs/algorithms/proteus.md §3.4), decoded.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MiReport {
    /// Schedule epoch the MI belongs to.
    pub epoch: u32,
    /// Index of the MI in its schedule.
    pub index: u32,
    /// Packets sent while the MI was the sending one.
    pub pkts_sent: u64,
    /// Time the MI was the sending one, µs (0 while it was still sending at the report).
    pub tx_dur: Micros,
    /// Packets acknowledged.
    pub acked: u64,
    /// Packets reported lost.
    pub lost: u64,
    pub sums: MiSums,
    /// Smallest RTT sample of the MI, µs.
    pub min_rtt_us: Option<u64>,
    /// A timeout happened since the previous report.
    pub timeout: bool,
    pub kind: ReportKind,
    /// Datapath time of the report.
    pub now: Micros,
}

/// Why an MI cannot be evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum InvalidMi {
    #[error("MI has {0} RTT samples at too few distinct send times for a regression")]
    NoRegression(u64),
}

/// What the utility needs from one MI, before the noise-tolerance rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MiMeasurement {
    /// The rate the MI was scheduled at, bit/s.
    pub target_bps: f64,
    /// Duration D, µs.
    pub duration_us: f64,
    /// Rate x for the utility, Mbit/s.
    pub x_mbps: f64,
    /// The MI sent well below its target (application or window limited).
    pub rate_limited: bool,
    /// Loss rate L.
    pub loss: f64,
    /// Packets acked or lost: the sample L is measured on.
    pub resolved: u64,
    pub stats: RttStats,
}

impl MiMeasurement {
    /// Builds the measurement of an MI scheduled at `target_bps` with packets of `mss`
    /// bytes.
    ///
    /// x is the target rate, not UDT's measured rate (§2.8 REC: pacing noise in a CCP
    /// datapath is of the order of the ±5 % probes), unless the MI sent less than 90 % of
    /// its target: then the measured rate is used, so a rate that was never sent is never
    /// rewarded (§3.6 suggests dropping such MIs; dropping would freeze a window-limited
    /// flow at a rate it cannot reach).
    pub fn new(report: &MiReport, target_bps: f64, mss: u64) -> Result<Self, InvalidMi> {
        let stats = RttStats::from_sums(&report.sums, pacing_gap_us(target_bps))
            .ok_or(InvalidMi::NoRegression(report.sums.n))?;
        let duration_us = mi_duration_us(report.tx_dur, target_bps);
        let sent_bits = report.pkts_sent.saturating_add(RATE_LIMITED_SLACK_PACKETS) as f64
            * mss as f64
            * BITS_PER_BYTE;
        let target_bits = target_bps * report.tx_dur.as_secs_f64();
        let rate_limited = report.tx_dur.0 > 0 && sent_bits < RATE_LIMITED_RATIO * target_bits;
        let x_mbps = if rate_limited {
            measured_rate_mbps(report.pkts_sent.saturating_mul(mss), duration_us)
        } else {
            target_bps / BITS_PER_SEC_PER_MBPS
        };
        let resolved = report.acked.saturating_add(report.lost);
        let loss = if resolved > 0 {
            report.lost as f64 / resolved as f64
        } else {
            0.0
        };
        Ok(MiMeasurement {
            target_bps,
            duration_us,
            x_mbps,
            rate_limited,
            loss,
            resolved,
            stats,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::{MAX_MI_SAMPLES, MAX_RTT_US, MAX_WINDOW_US, SEND_TIME_OFFSET_US};
    use proptest::prelude::*;

    fn rel(got: f64, want: f64, tol: f64) {
        assert!(
            (got - want).abs() <= tol * want.abs().max(1e-300),
            "got {got}, want {want}"
        );
    }

    fn sums_of(samples: &[(u64, u64)]) -> MiSums {
        let mut m = MiSums::default();
        for &(s, r) in samples {
            m.n += 1;
            m.sum_s += s;
            m.sum_r += r;
            m.sum_ss += s * s;
            m.sum_sr += s * r;
            m.sum_rr += r * r;
        }
        m
    }

    fn v_samples(r: &[u64]) -> Vec<(u64, u64)> {
        r.iter()
            .enumerate()
            .map(|(i, &r)| (4000 * (i as u64 + 1), r))
            .collect()
    }

    #[test]
    fn v1_trend_with_small_noise() {
        let r = [30000, 30700, 30600, 31300, 31300, 32200, 32300, 32800];
        let sums = sums_of(&v_samples(&r));
        assert_eq!(
            sums,
            MiSums {
                n: 8,
                sum_s: 144_000,
                sum_r: 251_200,
                sum_ss: 3_264_000_000,
                sum_sr: 4_586_400_000,
                sum_rr: 7_894_200_000,
            }
        );
        let m = sums.moments();
        assert_eq!(
            (m.c_ss, m.c_sr, m.c_rr),
            (5_376_000_000, 518_400_000, 52_160_000)
        );
        // Target 3 Mbit/s → τ = 4000 µs.
        assert_eq!(pacing_gap_us(3e6), 4000.0);
        let st = RttStats::from_sums(&sums, pacing_gap_us(3e6)).expect("valid");
        rel(st.gradient, 0.09642857142857143, 1e-12);
        rel(st.mean_us, 31400.0, 1e-12);
        rel(st.dev_us, 902.7735042633894, 1e-12);
        rel(st.error_udt, 0.02874386011662512, 1e-9);
        rel(st.error_ls, 0.005866149662523944, 1e-9);
        // The slope's standard error, as a textbook regression of the 8 samples gives it.
        rel(st.gradient_se, 0.008204790923863227, 1e-9);
        assert!(st.gradient.abs() > st.error(GradientError::Udt));
        assert!(st.gradient.abs() > st.error(GradientError::LeastSquares));
    }

    #[test]
    fn v2_pure_jitter() {
        let r = [30000, 31500, 29000, 30500, 28500, 31000, 29500, 30000];
        let sums = sums_of(&v_samples(&r));
        assert_eq!(
            (sums.sum_r, sums.sum_sr, sums.sum_rr),
            (240_000, 4_308_000_000, 7_207_000_000)
        );
        let m = sums.moments();
        assert_eq!((m.c_sr, m.c_rr), (-96_000_000, 56_000_000));
        let st = RttStats::from_sums(&sums, pacing_gap_us(3e6)).expect("valid");
        rel(st.gradient, -0.017857142857142856, 1e-12);
        rel(st.dev_us, 935.4143466934853, 1e-12);
        rel(st.error_udt, 0.031180239625922705, 1e-9);
        rel(st.gradient_se, 0.041023954619316134, 1e-9);
        rel(st.error_ls, 0.030699516567208613, 1e-9);
        assert!(st.gradient.abs() < st.error(GradientError::Udt));
        assert!(st.gradient.abs() < st.error(GradientError::LeastSquares));
    }

    #[test]
    fn mi_stats_to_rate_example() {
        // §5.1: 375,000 B over 59,760 µs at a 50 Mbit/s target: τ = 240, D = 60,000, x = 50.
        assert_eq!(pacing_gap_us(50e6), 240.0);
        let d = mi_duration_us(Micros(59_760), 50e6);
        assert_eq!(d, 60_000.0);
        rel(measured_rate_mbps(375_000, d), 50.0, 1e-12);
    }

    #[test]
    fn degenerate_sums_are_invalid_not_nan() {
        assert!(RttStats::from_sums(&sums_of(&[(5, 30_000)]), 1.0).is_none());
        assert!(RttStats::from_sums(&sums_of(&[(5, 30_000), (5, 31_000)]), 1.0).is_none());
        let r = MiReport {
            sums: sums_of(&[(5, 30_000), (5, 31_000)]),
            ..MiReport::default()
        };
        assert_eq!(
            MiMeasurement::new(&r, 1e6, 1448),
            Err(InvalidMi::NoRegression(2))
        );
    }

    #[test]
    fn loss_and_rate_limit() {
        // 10 Mbit/s for 100 ms is 86.3 packets of 1448 B; 80 sent is enough, 60 is not.
        let mut r = MiReport {
            sums: sums_of(&v_samples(&[30000, 30100, 30050, 30200])),
            tx_dur: Micros(100_000),
            pkts_sent: 80,
            acked: 95,
            lost: 5,
            ..MiReport::default()
        };
        let m = MiMeasurement::new(&r, 10e6, 1448).expect("valid");
        assert!(!m.rate_limited);
        assert_eq!(m.x_mbps, 10.0);
        rel(m.loss, 0.05, 1e-12);
        r.pkts_sent = 60;
        let m = MiMeasurement::new(&r, 10e6, 1448).expect("valid");
        assert!(m.rate_limited);
        rel(m.x_mbps, 60.0 * 1448.0 * 8.0 / (100_000.0 + 1200.0), 1e-12);
    }

    /// The program's accumulation (docs/algorithms/proteus.md §3.4 clause 7) with libccp's checks:
    /// ADD overflow aborts, MUL overflow would wrap silently, so both must be impossible.
    fn accumulate(m: &mut MiSums, since_rx_start_us: u64, rtt_us: u64) -> Option<()> {
        if rtt_us >= MAX_RTT_US {
            return Some(()); // the program skips such samples
        }
        let s = since_rx_start_us.min(SEND_TIME_OFFSET_US) + SEND_TIME_OFFSET_US - rtt_us;
        m.n = m.n.checked_add(1)?;
        m.sum_s = m.sum_s.checked_add(s)?;
        m.sum_r = m.sum_r.checked_add(rtt_us)?;
        m.sum_ss = m.sum_ss.checked_add(s.checked_mul(s)?)?;
        m.sum_sr = m.sum_sr.checked_add(s.checked_mul(rtt_us)?)?;
        m.sum_rr = m.sum_rr.checked_add(rtt_us.checked_mul(rtt_us)?)?;
        Some(())
    }

    #[test]
    fn worst_case_window_never_overflows() {
        // The guard reports once n > MAX_MI_SAMPLES; one ACK can add two samples (the
        // replayed closing sample and its own), so n can reach MAX_MI_SAMPLES + 2 with
        // every sample at the largest s and r.
        let mut m = MiSums::default();
        for _ in 0..MAX_MI_SAMPLES + 2 {
            accumulate(&mut m, u64::from(u32::MAX) * 4, 0).expect("no overflow (s max)");
        }
        let mut m = MiSums::default();
        for _ in 0..MAX_MI_SAMPLES + 2 {
            accumulate(&mut m, MAX_WINDOW_US, MAX_RTT_US - 1).expect("no overflow (r max)");
        }
        // The user-space moments stay exact in i128.
        let mo = m.moments();
        assert!(mo.c_ss >= 0 && mo.c_rr >= 0);
    }

    proptest! {
        #[test]
        fn sums_never_overflow_and_match_exact_statistics(
            samples in proptest::collection::vec((0u64..(1 << 34), 0u64..(1 << 22) + 5), 2..300),
            scale in 0u64..4,
        ) {
            // Any datapath times (gaps beyond 2^32 µs included) and any RTT below K.
            let mut m = MiSums::default();
            let mut kept = Vec::new();
            for &(dt, r) in &samples {
                let dt = dt >> (scale * 8);
                prop_assert!(accumulate(&mut m, dt, r).is_some());
                if r < MAX_RTT_US {
                    kept.push(((dt.min(SEND_TIME_OFFSET_US) + SEND_TIME_OFFSET_US - r) as f64, r as f64));
                }
            }
            // The exact moments agree with a two-pass f64 computation.
            if let Some(st) = RttStats::from_sums(&m, 1.0) {
                let n = kept.len() as f64;
                let mr = kept.iter().map(|p| p.1).sum::<f64>() / n;
                let var = kept.iter().map(|p| (p.1 - mr).powi(2)).sum::<f64>() / n;
                prop_assert!((st.mean_us - mr).abs() <= 1e-6 * mr.max(1.0));
                prop_assert!((st.dev_us - var.sqrt()).abs() <= 1e-6 * mr.max(1.0) + 1e-6);
            }
        }
    }
}
