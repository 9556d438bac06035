use crate::units::{Bytes, BytesPerSec, Micros};
use serde::Serialize;

/// What a window- or rate-based controller wants the datapath to apply.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Decision {
    /// Congestion window; `None` leaves it as it is.
    pub cwnd: Option<Bytes>,
    /// Pacing rate; `None` leaves it as it is.
    pub rate: Option<BytesPerSec>,
}

/// The state a flow carries when the runtime hands it from one algorithm to another (for
/// example LEDBAT++ to CUBIC when its application asks for primary priority; docs/algorithms/ledbat-pp.md
/// §6). The receiving controller starts from it instead of from a fresh slow start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CarriedState {
    /// The window to continue with.
    pub cwnd: Bytes,
    /// Slow-start threshold, if the old controller had a meaningful one.
    pub ssthresh: Option<Bytes>,
    /// Pacing rate in force, if any.
    pub rate: Option<BytesPerSec>,
    /// Smoothed RTT estimate.
    pub srtt: Option<Micros>,
    /// Minimum RTT seen.
    pub min_rtt: Option<Micros>,
    /// Datapath time of the hand-off.
    pub at: Micros,
}
