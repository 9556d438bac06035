//! One ACK's measurements ([`AckPrimitives`], docs/datapaths.md §4.2) handed to libccp.

use algs_core::AckPrimitives;

/// `p` as the libccp crate's type.
pub fn to_libccp(p: AckPrimitives) -> libccp::Primitives {
    libccp::Primitives::default()
        .with_bytes_acked(p.bytes_acked)
        .with_packets_acked(p.packets_acked)
        .with_bytes_misordered(p.bytes_misordered)
        .with_packets_misordered(p.packets_misordered)
        .with_lost_pkts_sample(p.lost_pkts_sample)
        .with_was_timeout(p.was_timeout)
        .with_rtt_sample_us(p.rtt_sample_us)
        .with_rate_outgoing(p.rate_outgoing)
        .with_rate_incoming(p.rate_incoming)
        .with_bytes_in_flight(p.bytes_in_flight)
        .with_packets_in_flight(p.packets_in_flight)
        .with_snd_cwnd(p.snd_cwnd)
        .with_snd_rate(p.snd_rate)
        .with_bytes_pending(p.bytes_pending)
}
