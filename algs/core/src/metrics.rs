//! A controller's view of itself, for the agent's flow trace.

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
