//! From one ACK record of the BPF side to libccp's primitives, as ccp-kernel's
//! `load_primitives` does (docs/datapaths.md §4.2), with the deviations listed in `main.rs`.
//!
//! Pure: measurements in, primitive values out; the per-flow counters that turn the
//! kernel's cumulative values into per-ACK deltas are passed in.

use algs_core::AckPrimitives;
use algs_core::register::{INFINITY_REGISTER, clamp_to_register};

use crate::shared::ccp_event;

const USEC_PER_SEC: u64 = 1_000_000;

/// The per-flow memory that turns cumulative kernel counters into per-ACK values.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FlowCounters {
    /// `tp->bytes_acked` at the previous ACK, bytes.
    pub last_bytes_acked: u64,
    /// `tp->sacked_out` at the previous ACK, packets.
    pub last_sacked_out_pkts: u32,
}

/// Bytes/s for `delivered` packets of `mss` bytes over `interval_us`; 0 when either is 0.
fn rate_bytes_per_sec(delivered_pkts: u32, mss_bytes: u32, interval_us: u32) -> u64 {
    if delivered_pkts == 0 || interval_us == 0 {
        return 0;
    }
    u64::from(delivered_pkts) * u64::from(mss_bytes) * USEC_PER_SEC / u64::from(interval_us)
}

/// The primitives for one ACK record, updating the flow's counters. `applied_cwnd` is the
/// window (bytes) the daemon last wrote for the flow, 0 for none.
///
/// `snd_cwnd` is that window rather than the kernel's in the record: records arrive in
/// batches, so the kernel's value predates the latest decision, and libccp loads `Cwnd`
/// from `snd_cwnd` before each run and calls `set_cwnd` with it after, which would write
/// the stale window back. A record made while the BPF fallback ran keeps the kernel's.
pub fn from_ack(ev: &ccp_event, counters: &mut FlowCounters, applied_cwnd: u32) -> AckPrimitives {
    let mss = u64::from(ev.mss_bytes);
    let bytes_acked = ev.bytes_acked.saturating_sub(counters.last_bytes_acked);
    counters.last_bytes_acked = ev.bytes_acked;
    // SACKed packets are acknowledged out of order; a shrinking SACK count (the hole was
    // filled) is not negative misordering.
    let packets_misordered = ev
        .sacked_out_pkts
        .saturating_sub(counters.last_sacked_out_pkts);
    counters.last_sacked_out_pkts = ev.sacked_out_pkts;
    // tcp_packets_in_flight(): packets_out - (sacked_out + lost_out) + retrans_out.
    let packets_in_flight = ev
        .packets_out_pkts
        .saturating_sub(ev.sacked_out_pkts.saturating_add(ev.lost_out_pkts))
        .saturating_add(ev.retrans_out_pkts);
    let rtt_sample_us = u64::try_from(ev.rtt_us).unwrap_or(INFINITY_REGISTER);

    AckPrimitives {
        bytes_acked: clamp_to_register(bytes_acked),
        packets_acked: ev.acked_sacked_pkts.saturating_sub(packets_misordered),
        bytes_misordered: clamp_to_register(u64::from(packets_misordered) * mss),
        packets_misordered,
        lost_pkts_sample: ev.losses_pkts,
        was_timeout: false,
        rtt_sample_us,
        rate_outgoing: rate_bytes_per_sec(ev.delivered_pkts, ev.mss_bytes, ev.snd_interval_us),
        rate_incoming: rate_bytes_per_sec(ev.delivered_pkts, ev.mss_bytes, ev.rcv_interval_us),
        bytes_in_flight: clamp_to_register(u64::from(packets_in_flight) * mss),
        packets_in_flight,
        snd_cwnd: if ev.in_fallback == 0 && applied_cwnd > 0 {
            applied_cwnd
        } else {
            clamp_to_register(u64::from(ev.snd_cwnd_pkts) * mss)
        },
        // The record carries no pacing rate.
        snd_rate: 0,
        bytes_pending: ev.write_seq.wrapping_sub(ev.snd_una),
    }
}

/// The primitives for a retransmission timeout (ccp-kernel invokes on entering
/// TCP_CA_Loss with `was_timeout` set and nothing acknowledged): no counts and no RTT
/// sample; the flow's state as the last ACK left it.
pub fn on_timeout(last: &AckPrimitives) -> AckPrimitives {
    AckPrimitives {
        was_timeout: true,
        rate_outgoing: last.rate_outgoing,
        rate_incoming: last.rate_incoming,
        bytes_in_flight: last.bytes_in_flight,
        packets_in_flight: last.packets_in_flight,
        snd_cwnd: last.snd_cwnd,
        snd_rate: last.snd_rate,
        bytes_pending: last.bytes_pending,
        ..AckPrimitives::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(bytes_acked: u64, acked: u32, sacked_out: u32) -> ccp_event {
        ccp_event {
            kind: crate::shared::ccp_event_kind_CCP_EV_ACK,
            flow_id: 1,
            mss_bytes: 1448,
            snd_cwnd_pkts: 10,
            acked_sacked_pkts: acked,
            delivered_pkts: 2,
            snd_interval_us: 1000,
            rcv_interval_us: 2000,
            rtt_us: 20_000,
            packets_out_pkts: 10,
            sacked_out_pkts: sacked_out,
            lost_out_pkts: 1,
            retrans_out_pkts: 1,
            bytes_acked,
            write_seq: 5000,
            snd_una: 1000,
            ..Default::default()
        }
    }

    #[test]
    fn window_is_the_daemons_decision_unless_the_fallback_ran() {
        let mut c = FlowCounters::default();
        let kernel = 10 * 1448;
        assert_eq!(from_ack(&ack(0, 1, 0), &mut c, 0).snd_cwnd, kernel);
        assert_eq!(from_ack(&ack(0, 1, 0), &mut c, 7828).snd_cwnd, 7828);
        let fallback = ccp_event {
            in_fallback: 1,
            ..ack(0, 1, 0)
        };
        assert_eq!(from_ack(&fallback, &mut c, 7828).snd_cwnd, kernel);
    }

    #[test]
    fn cumulative_bytes_acked_becomes_a_per_ack_delta() {
        let mut c = FlowCounters::default();
        assert_eq!(from_ack(&ack(2896, 2, 0), &mut c, 0).bytes_acked, 2896);
        assert_eq!(from_ack(&ack(4344, 1, 0), &mut c, 0).bytes_acked, 1448);
    }

    #[test]
    fn sacked_packets_count_as_misordered_not_acked() {
        let mut c = FlowCounters::default();
        let p = from_ack(&ack(0, 3, 2), &mut c, 0);
        assert_eq!(p.packets_misordered, 2);
        assert_eq!(p.packets_acked, 1);
        assert_eq!(p.bytes_misordered, 2 * 1448);
        // The hole is filled: sacked_out falls back to 0, which is not misordering.
        let p = from_ack(&ack(4344, 3, 0), &mut c, 0);
        assert_eq!(p.packets_misordered, 0);
        assert_eq!(p.packets_acked, 3);
    }

    #[test]
    fn in_flight_rates_and_window_follow_the_kernel_definitions() {
        let mut c = FlowCounters::default();
        let p = from_ack(&ack(0, 1, 2), &mut c, 0);
        // 10 out - (2 sacked + 1 lost) + 1 retransmitted.
        assert_eq!(p.packets_in_flight, 8);
        assert_eq!(p.bytes_in_flight, 8 * 1448);
        assert_eq!(p.rate_outgoing, 2 * 1448 * 1_000_000 / 1000);
        assert_eq!(p.rate_incoming, 2 * 1448 * 1_000_000 / 2000);
        assert_eq!(p.snd_cwnd, 14480);
        assert_eq!(p.bytes_pending, 4000);
        assert_eq!(p.rtt_sample_us, 20_000);
    }

    #[test]
    fn a_missing_rtt_sample_reads_as_u32_max_like_ccp_kernel() {
        let mut c = FlowCounters::default();
        let mut e = ack(0, 1, 0);
        e.rtt_us = -1;
        assert_eq!(from_ack(&e, &mut c, 0).rtt_sample_us, INFINITY_REGISTER);
    }

    #[test]
    fn an_invalid_rate_sample_gives_zero_rates() {
        let mut c = FlowCounters::default();
        let mut e = ack(0, 1, 0);
        e.delivered_pkts = 0;
        let p = from_ack(&e, &mut c, 0);
        assert_eq!((p.rate_outgoing, p.rate_incoming), (0, 0));
    }

    #[test]
    fn sequence_wrap_keeps_bytes_pending_small() {
        let mut c = FlowCounters::default();
        let mut e = ack(0, 1, 0);
        e.snd_una = u32::MAX - 99;
        e.write_seq = 100;
        assert_eq!(from_ack(&e, &mut c, 0).bytes_pending, 200);
    }

    #[test]
    fn a_timeout_keeps_the_window_and_flags_was_timeout() {
        let mut c = FlowCounters::default();
        let p = from_ack(&ack(2896, 2, 0), &mut c, 0);
        let t = on_timeout(&p);
        assert!(t.was_timeout);
        assert_eq!(t.packets_acked, 0);
        assert_eq!(t.snd_cwnd, p.snd_cwnd);
        assert_eq!(t.rtt_sample_us, INFINITY_REGISTER);
    }
}
