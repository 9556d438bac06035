//! `ccp-emu`: a user-space, Mahimahi-compatible bottleneck emulator over TUN devices in two
//! network namespaces. Semantics follow docs/mahimahi.md: one-way delay in ms, a
//! trace-driven link with 1504-byte delivery opportunities, droptail/drophead queues limited
//! in bytes or packets, and uplink/downlink logs in Mahimahi's format.
//!
//! Deviations from Mahimahi:
//! - the delay is exact to the µs (Mahimahi rounds to whole ms ticks); link opportunities are
//!   at whole ms like Mahimahi's, so a packet still waits up to 1 ms for the next one;
//! - sender and receiver are both in namespaces of their own, with no NAT and no route to
//!   the host; the receiver is `MAHIMAHI_BASE` = 10.0.0.1 as in Mahimahi;
//! - the namespaces default to CUBIC and large TCP buffers (`--default-cc`, `--tcp-mem`);
//! - `loss uplink|downlink RATE` (Mahimahi's `mm-loss`) takes a seed (`--loss-seed`) so
//!   that a run's losses can be repeated; no `codel`, `pie`, `--once` or meters;
//! - an extra per-flow delivery log (`--flow-log`, see [`flowlog`]).

pub mod cli;
pub mod disk;
pub mod flowlog;
pub mod link;
pub mod log;
pub mod loss;
pub mod pipeline;
pub mod queue;
pub mod run;
pub mod sys;
pub mod trace;
