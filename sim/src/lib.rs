//! A deterministic single-bottleneck packet model for tests.
//!
//! What it is for: running congestion controllers closed-loop without a network, fast and
//! reproducibly. The libccp test datapath (`ccp-testdp sim`) drives its CCP flows through
//! the real libccp and the agent; algorithm crates drive their pure controllers directly
//! through [`harness::run`]. Both get the same [`Summary`].
//!
//! * [`Scenario`]: link (capacity, base RTT, droptail buffer, duration, MSS), CCP flows
//!   (start/stop, priority changes), cross traffic (constant rate, or a built-in Reno-like
//!   AIMD flow), report windows.
//! * [`Sim`]: the event-driven model (see [`model`] for every modelling choice); the
//!   driver pulls [`SimEvent`]s for the CCP flows and answers with windows and rates.
//!   [`AckSample`] carries libccp's per-ACK primitives with their units and conventions.
//! * [`Summary`]: throughput overall, per window and per 100 ms bin; queueing delay
//!   distribution; utilization; drops; window, rate and RTT series.
//!
//! No randomness, no clock, no I/O: the same scenario gives the same summary, bit for bit.
//! No `ln`/`log` either: the model runs inside binaries that link libccp (docs/datapaths.md §5.5).
//!
//! Deviations from a real TCP path, on purpose: no headers (capacity counts segment bytes),
//! no retransmissions (a backlogged sender sends new data instead), no duplicate-ACK
//! threshold (the first later ACK reveals a loss), no delayed ACKs, no ACK-path queueing.

mod aimd;
pub mod harness;
pub mod model;
mod scenario;
mod summary;

pub use harness::{Controller, HarnessError};
pub use model::{AckSample, FlowId, InvariantViolation, Sim, SimEvent};
pub use scenario::{
    CcpFlowSpec, CrossSpec, DEFAULT_BIN_MS, DEFAULT_INIT_CWND_PKTS, DEFAULT_MSS, LinkSpec,
    PriorityChange, PriorityClassName, ReportWindow, Scenario, ScenarioError,
};
pub use summary::{DelayStats, FlowSummary, Summary, WindowFlow, WindowSummary};

#[cfg(test)]
mod tests;
