//! A deterministic single-bottleneck packet model for tests.
//!
//! What it is for: running congestion controllers closed-loop without a network, fast and
//! reproducibly. The libccp test datapath (`ccp-testdp sim`) drives its CCP flows through
//! the real libccp and the agent; algorithm crates drive their pure controllers directly
//! through [`harness::run`]. Both get the same [`Summary`].
//!
//! * [`Scenario`]: link (capacity, base RTT, droptail buffer, duration, MSS, random loss,
//!   delivery at whole milliseconds as on Mahimahi's and the emulator's trace links),
//!   CCP flows (start/stop, priority changes, stretch ACKs), cross traffic (constant rate, or
//!   a built-in Reno-like AIMD flow), report windows.
//! * [`Sim`]: the event-driven model (see [`model`] for every modelling choice); the
//!   driver pulls [`SimEvent`]s for the CCP flows and answers with windows and rates.
//!   [`AckSample`] carries libccp's per-ACK primitives with their units and conventions.
//! * [`Summary`]: throughput overall, per window and per 100 ms bin (and over any window of
//!   whole bins after the run, [`Summary::mbps`]); queueing delay distribution; utilization;
//!   drops and random losses; window, rate and RTT series; a per-step trace.
//!
//! No clock, no I/O, no randomness but the seeded, deterministic random-loss draw: the same
//! scenario gives the same summary, bit for bit.
//! No `ln`/`log` either: the model runs inside binaries that link libccp (docs/datapaths.md §5.5).
//!
//! Deviations from a real TCP path, on purpose: no headers (capacity counts segment bytes),
//! no retransmissions (a backlogged sender sends new data instead), no duplicate-ACK
//! threshold (the first later ACK reveals a loss), no delayed ACKs (stretch ACKs only when a
//! flow asks for them), no ACK-path queueing.

mod aimd;
pub mod harness;
mod loss;
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
