//! Metrics of the papers, as pure functions: throughput over a window, percentiles, CDFs,
//! Jain's index, the primary throughput ratio and harm (Ware et al., HotNets 2019).

/// One measurement interval of a flow: [start, end) in s since the run started, bytes.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Interval {
    /// Start, s since the run started.
    pub start_s: f64,
    /// End, s since the run started.
    pub end_s: f64,
    /// Bytes received in the interval.
    pub bytes: f64,
}

/// Mean throughput in [from_s, to_s], bit/s, counting intervals in proportion to their
/// overlap with the window. Time in the window outside every interval counts as zero.
pub fn throughput_in(intervals: &[Interval], from_s: f64, to_s: f64) -> f64 {
    if to_s <= from_s {
        return 0.0;
    }
    let bytes: f64 = intervals
        .iter()
        .filter(|i| i.end_s > i.start_s)
        .map(|i| {
            let overlap = i.end_s.min(to_s) - i.start_s.max(from_s);
            if overlap > 0.0 {
                i.bytes * overlap / (i.end_s - i.start_s)
            } else {
                0.0
            }
        })
        .sum();
    bytes * 8.0 / (to_s - from_s)
}

/// The p-th percentile (0..=100) by nearest rank; None for no samples.
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// Empirical CDF points (value, fraction of samples <= value), sorted by value.
pub fn cdf(samples: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.into_iter()
        .enumerate()
        .map(|(i, x)| (x, (i + 1) as f64 / n))
        .collect()
}

pub use algs_core::metrics::jain;

/// Primary throughput ratio: with the competitor / alone.
pub fn ratio(with: f64, alone: f64) -> Option<f64> {
    (alone > 0.0).then(|| with / alone)
}

/// Harm of a competitor on a flow for a metric (Ware et al.): the fraction of the flow's
/// performance alone that the competitor takes away, 0 = none, 1 = all.
/// For more-is-better metrics (throughput): (alone - with) / alone; for less-is-better
/// (latency): (with - alone) / with. Clamped at 0 (a competitor that helps does no harm).
pub fn harm(alone: f64, with: f64, more_is_better: bool) -> Option<f64> {
    let h = if more_is_better {
        (alone > 0.0).then(|| (alone - with) / alone)
    } else {
        (with > 0.0).then(|| (with - alone) / with)
    }?;
    Some(h.max(0.0))
}

/// Maximum TCP goodput of a Mahimahi link of `mbps`, bit/s. Mahimahi counts one 1504-byte
/// opportunity per ms as 12 Mbit/s, and each opportunity carries 1448 bytes of TCP payload
/// (docs/mahimahi.md §2: N x 1000 x 1448 x 8 bit/s at N lines per ms).
pub fn max_goodput_bits_per_sec(mbps: f64) -> f64 {
    mbps / MBPS_PER_LINE_PER_MS * 1000.0 * 1448.0 * 8.0
}

/// Mahimahi's rate of one opportunity per ms, Mbit/s.
const MBPS_PER_LINE_PER_MS: f64 = 12.0;

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(start_s: f64, end_s: f64, bytes: f64) -> Interval {
        Interval {
            start_s,
            end_s,
            bytes,
        }
    }

    #[test]
    fn throughput_counts_partial_overlaps() {
        let ivs = [iv(0.0, 1.0, 1000.0), iv(1.0, 2.0, 3000.0)];
        assert_eq!(throughput_in(&ivs, 0.0, 2.0), 16_000.0);
        // Half of each interval: 500 + 1500 bytes in 1 s.
        assert_eq!(throughput_in(&ivs, 0.5, 1.5), 16_000.0);
        // A window reaching past the data counts the gap as zero.
        assert_eq!(throughput_in(&ivs, 1.0, 3.0), 12_000.0);
        assert_eq!(throughput_in(&ivs, 2.0, 2.0), 0.0);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&xs, 95.0), Some(95.0));
        assert_eq!(percentile(&xs, 0.0), Some(1.0));
        assert_eq!(percentile(&xs, 100.0), Some(100.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn cdf_ends_at_one() {
        let c = cdf(&[3.0, 1.0, 2.0, 2.0]);
        assert_eq!(c, [(1.0, 0.25), (2.0, 0.5), (2.0, 0.75), (3.0, 1.0)]);
    }

    #[test]
    fn harm_follows_ware_et_al() {
        // BBR alone 45.7, with a CUBIC competitor 5.1 (docs/mahimahi.md §6).
        let h = harm(45.7, 5.1, true).expect("defined");
        assert!((h - 0.888_4).abs() < 1e-3);
        // Latency: 49 ms alone, 124 ms with a competitor.
        let h = harm(49.0, 124.0, false).expect("defined");
        assert!((h - 75.0 / 124.0).abs() < 1e-12);
        assert_eq!(
            harm(10.0, 12.0, true),
            Some(0.0),
            "help is not negative harm"
        );
        assert_eq!(harm(0.0, 1.0, true), None);
    }

    #[test]
    fn goodput_of_48_mbps_is_46_3() {
        let g = max_goodput_bits_per_sec(48.0) / 1e6;
        assert!((g - 46.336).abs() < 1e-9, "{g}");
    }
}
