//! Shared, pure building blocks of this project's congestion controllers.
//!
//! Everything here is plain data and arithmetic: no clock, no I/O, no logging. Time always
//! arrives as an argument (datapath time in microseconds, taken from the reports), which is
//! what keeps every algorithm test deterministic.
//!
//! * [`units`]: `Bytes`, `Micros`, `BytesPerSec` and their named conversions.
//! * [`Priority`]: what an application asked a flow to be.
//! * [`Decision`] and [`CarriedState`]: what a controller tells the datapath, and what it
//!   hands to the next controller when a flow changes algorithm.
//! * [`filter::WindowedMin`]: a time-windowed minimum (min RTT).
//! * [`metrics::FlowMetrics`]: a controller's state for the flow trace.
//! * [`register`]: libccp's register limits (`+infinity`, no RTT sample, u32 registers).
//! * [`AckPrimitives`]: one ACK's measurements as every datapath hands them to libccp.
//! * `ccp` (feature): the interface through which the agent runtime drives an algorithm.

pub mod filter;
pub mod metrics;
pub mod register;
pub mod units;

#[cfg(feature = "ccp")]
pub mod ccp;

mod primitives;
mod priority;
mod state;

pub use primitives::AckPrimitives;
pub use priority::Priority;
pub use state::{CarriedState, Decision};
pub use units::{Bytes, BytesPerSec, Micros};
