//! A controller's view of itself, for the agent's flow trace; and how flows are judged
//! together (Jain's index), for the experiments and the tests.

use crate::priority::Priority;
use serde::Serialize;

/// One flow's state after a decision: the common columns plus the algorithm's own.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowMetrics {
    pub priority: Priority,
    /// Window in force, bytes.
    pub cwnd_bytes: Option<u64>,
    /// Pacing rate in force, bytes/s.
    pub rate_bytes_per_sec: Option<f64>,
    /// The controller's state-machine state (e.g. "slow_start", "probing").
    pub state: &'static str,
    /// Algorithm-specific values (utility, queueing delay, ...), with units in their names.
    pub extra: Vec<(&'static str, f64)>,
}

/// Jain's fairness index (Σx)² / (n·Σx²) of the throughputs `xs` (R. Jain, D. Chiu, W. Hawe,
/// DEC-TR-301, 1984): 1 when all are equal, 1/n when one flow has everything; `None` for no
/// flows or none that moved anything.
pub fn jain(xs: &[f64]) -> Option<f64> {
    let sum: f64 = xs.iter().sum();
    let sum_sq: f64 = xs.iter().map(|x| x * x).sum();
    (sum_sq > 0.0).then(|| sum * sum / (xs.len() as f64 * sum_sq))
}

#[cfg(test)]
mod tests {
    use super::jain;

    #[test]
    fn jain_is_one_for_equal_shares_and_one_over_n_for_a_hog() {
        assert_eq!(jain(&[5.0, 5.0, 5.0]), Some(1.0));
        let hog = jain(&[9.0, 0.0, 0.0]).expect("nonzero");
        assert!((hog - 1.0 / 3.0).abs() < 1e-12);
        assert!((jain(&[30.0, 10.0]).expect("nonzero") - 0.8).abs() < 1e-12);
        assert_eq!(jain(&[0.0, 0.0]), None);
        assert_eq!(jain(&[]), None);
    }
}
