//! One ACK's (or one timeout's) measurements in libccp's primitive units
//! (docs/datapaths.md §4.2), whichever datapath took them: the eBPF datapath from the
//! kernel's records, the QUIC datapath from quinn's ACK frames, the bottleneck model from
//! its own packets. A datapath hands them to libccp through `ccp-host`.

use crate::register::INFINITY_REGISTER;

/// The values of libccp's `ccp_primitives` for one invocation. A datapath that cannot
/// measure one leaves it at its default (its docs say which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckPrimitives {
    pub bytes_acked: u32,
    pub packets_acked: u32,
    pub bytes_misordered: u32,
    pub packets_misordered: u32,
    pub lost_pkts_sample: u32,
    pub was_timeout: bool,
    /// µs; [`INFINITY_REGISTER`], what libccp reads for a missing sample, without one.
    pub rtt_sample_us: u64,
    /// Bytes/s over the send interval of the rate sample; 0 without a valid sample.
    pub rate_outgoing: u64,
    /// Bytes/s over the receive interval of the rate sample; 0 without a valid sample.
    pub rate_incoming: u64,
    pub bytes_in_flight: u32,
    pub packets_in_flight: u32,
    /// Bytes.
    pub snd_cwnd: u32,
    /// Pacing rate in force, bytes/s; 0 for none.
    pub snd_rate: u64,
    pub bytes_pending: u32,
}

impl AckPrimitives {
    /// The RTT sample, if this ACK carried one.
    pub fn rtt_sample(&self) -> Option<u64> {
        (self.rtt_sample_us > 0 && self.rtt_sample_us < INFINITY_REGISTER)
            .then_some(self.rtt_sample_us)
    }
}

/// Nothing measured: zero counts and no RTT sample.
impl Default for AckPrimitives {
    fn default() -> Self {
        AckPrimitives {
            bytes_acked: 0,
            packets_acked: 0,
            bytes_misordered: 0,
            packets_misordered: 0,
            lost_pkts_sample: 0,
            was_timeout: false,
            rtt_sample_us: INFINITY_REGISTER,
            rate_outgoing: 0,
            rate_incoming: 0,
            bytes_in_flight: 0,
            packets_in_flight: 0,
            snd_cwnd: 0,
            snd_rate: 0,
            bytes_pending: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_has_no_rtt_sample() {
        let p = AckPrimitives::default();
        assert_eq!(p.rtt_sample_us, INFINITY_REGISTER);
        assert_eq!(p.rtt_sample(), None);
        let p = AckPrimitives {
            rtt_sample_us: 30_000,
            ..p
        };
        assert_eq!(p.rtt_sample(), Some(30_000));
    }
}
