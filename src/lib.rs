//! The CCP agent: runs this project's congestion controllers for flows of any CCP datapath
//! and carries applications' priority changes to them (see docs/architecture.md).
//!
//! * [`runtime`]: the event handling (datapath messages in, algorithm calls out).
//! * [`programs`]: compiling and checking datapath programs against libccp's real limits.
//! * [`policy`]: per-flow algorithm selection rules.
//! * [`registry`]: the algorithms the agent ships.
//! * [`trace`]: the per-decision flow trace.
//! * [`agent`], [`cli`]: putting it together.

pub mod agent;
pub mod cli;
pub mod fixed;
pub mod policy;
pub mod programs;
pub mod registry;
pub mod runtime;
pub mod trace;

/// The wire format, shared with datapaths.
pub use ccp_wire as wire;
