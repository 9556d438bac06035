//! What the runtime has seen, for the exit summary, tests and benchmarks.

use serde::Serialize;
use std::collections::BTreeMap;

/// Message and error counts since the agent started.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Counters {
    pub datagrams: u64,
    pub ready: u64,
    pub creates: u64,
    pub reports: u64,
    pub closes: u64,
    pub priorities: u64,
    pub syncs: u64,
    pub handoffs: u64,
    pub installs_sent: u64,
    /// Reports from a program the flow has since replaced.
    pub stale_reports: u64,
    /// Measure or PRIORITY for a sid the datapath never created (or already closed).
    pub unknown_flow: u64,
    /// Messages from an address that never said Ready (rejected, never applied).
    pub unknown_datapath: u64,
    /// Create naming an algorithm that is not registered (served by policy/default).
    pub unknown_algorithm: u64,
    /// Errors returned by algorithms.
    pub flow_errors: u64,
    /// Sends that failed; the datapath was forgotten.
    pub send_errors: u64,
    /// Messages lost because too much waited for a datapath that did not read.
    pub sends_dropped: u64,
    /// Messages that waited for room in a datapath's queue.
    pub sends_deferred: u64,
    pub datapaths_lost: u64,
    /// Malformed or unexpected messages, by reason.
    pub bad_messages: BTreeMap<&'static str, u64>,
}

impl Counters {
    pub fn bad(&mut self, reason: &'static str) {
        *self.bad_messages.entry(reason).or_default() += 1;
    }

    pub fn bad_total(&self) -> u64 {
        self.bad_messages.values().sum()
    }
}
