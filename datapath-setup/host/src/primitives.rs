//! One ACK's (or one timeout's) measurements in libccp's primitive units
//! (docs/datapaths.md §4.2), whichever datapath took them: the eBPF datapath from the
//! kernel's records, the QUIC datapath from quinn's ACK frames, the bottleneck model from
//! its own samples (feature `sim`).

/// libccp reads a missing RTT sample as u32::MAX; algorithms compare `Flow.rtt_sample_us`
/// against it.
pub const NO_RTT_SAMPLE_US: u64 = algs_core::register::INFINITY_REGISTER;

/// The values of libccp's `ccp_primitives` for one invocation. A datapath that cannot
/// measure one leaves it 0 (its docs say which).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AckPrimitives {
    pub bytes_acked: u32,
    pub packets_acked: u32,
    pub bytes_misordered: u32,
    pub packets_misordered: u32,
    pub lost_pkts_sample: u32,
    pub was_timeout: bool,
    /// µs; [`NO_RTT_SAMPLE_US`] without a sample.
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
    /// Into the libccp crate's type.
    pub fn to_libccp(self) -> libccp::Primitives {
        libccp::Primitives::default()
            .with_bytes_acked(self.bytes_acked)
            .with_packets_acked(self.packets_acked)
            .with_bytes_misordered(self.bytes_misordered)
            .with_packets_misordered(self.packets_misordered)
            .with_lost_pkts_sample(self.lost_pkts_sample)
            .with_was_timeout(self.was_timeout)
            .with_rtt_sample_us(self.rtt_sample_us)
            .with_rate_outgoing(self.rate_outgoing)
            .with_rate_incoming(self.rate_incoming)
            .with_bytes_in_flight(self.bytes_in_flight)
            .with_packets_in_flight(self.packets_in_flight)
            .with_snd_cwnd(self.snd_cwnd)
            .with_snd_rate(self.snd_rate)
            .with_bytes_pending(self.bytes_pending)
    }
}

/// A count that may exceed libccp's 32-bit primitives, saturated.
pub fn saturating_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// A sample of the bottleneck model: the same names and units (the model counts no
/// misordering).
#[cfg(feature = "sim")]
impl From<&ccp_sim::AckSample> for AckPrimitives {
    fn from(a: &ccp_sim::AckSample) -> Self {
        AckPrimitives {
            bytes_acked: a.bytes_acked,
            packets_acked: a.packets_acked,
            lost_pkts_sample: a.lost_pkts_sample,
            was_timeout: a.was_timeout,
            rtt_sample_us: a.rtt_sample_us,
            rate_outgoing: a.rate_outgoing,
            rate_incoming: a.rate_incoming,
            bytes_in_flight: a.bytes_in_flight,
            packets_in_flight: a.packets_in_flight,
            snd_cwnd: a.snd_cwnd,
            snd_rate: a.snd_rate,
            bytes_pending: a.bytes_pending,
            ..AckPrimitives::default()
        }
    }
}
